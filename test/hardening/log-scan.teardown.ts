import { readdirSync, readFileSync, rmSync } from 'node:fs';
import * as path from 'node:path';
import { forbiddenTerms, isLogLine } from './log-terms';

/**
 * Jest globalTeardown: every log line the run wrote is searched for the fixtures' patient data
 * and the tests' secrets; one found fails the run, naming the kind, the term and where.
 */
export default function teardown(): void {
  const dir = process.env.DENTAL_ELIG_LOG_CAPTURE_DIR;
  if (!dir) return;
  const terms = forbiddenTerms(path.resolve(__dirname, '..', '..'));
  const leaks: string[] = [];
  let scanned = 0;
  for (const name of readdirSync(dir)) {
    for (const entry of readFileSync(path.join(dir, name), 'utf8').split('\n')) {
      const tab = entry.indexOf('\t');
      if (tab < 0) continue;
      const source = entry.slice(0, tab);
      const line = entry.slice(tab + 1);
      if (!isLogLine(source, line)) continue;
      scanned++;
      for (const term of terms) {
        if (term.pattern.test(line)) leaks.push(`${term.kind} "${term.text}" in a ${source} line of ${name}: ${line.slice(0, 300)}`);
      }
    }
  }
  rmSync(dir, { recursive: true, force: true });
  if (leaks.length > 0) throw new Error(`log scan: ${leaks.length} log lines hold patient data or a secret:\n${leaks.slice(0, 20).join('\n')}`);
  process.stdout.write(`log scan: ${scanned} log lines, none with patient data or a secret (${terms.length} terms)\n`);
}
