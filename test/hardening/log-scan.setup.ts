import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import * as path from 'node:path';

/** Jest globalSetup: a folder for the workers' captured logs (log-capture.ts), scanned by log-scan.teardown.ts. */
export default function setup(): void {
  process.env.DENTAL_ELIG_LOG_CAPTURE_DIR = mkdtempSync(path.join(tmpdir(), 'elig-logs-'));
}
