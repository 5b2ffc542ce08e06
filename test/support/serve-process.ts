import { spawn, type ChildProcess } from 'node:child_process';
import * as path from 'node:path';
import { projectRoot } from '../../src/mapping-files';
import { segment } from '../adapters/hl7/segment';

/** `dental-elig serve` as its own process, as production runs it, and bookings to feed it. */
export const bin = path.join(projectRoot, 'bin', 'dental-elig.js');
const PAYERS = [
  ['64246', 'Guardian'],
  ['62308', 'Cigna Dental'],
  ['CDCA1', 'Delta Dental of California'],
  ['65978', 'MetLife'],
] as const;

export function booking(i: number): string {
  const [payerId, payerName] = PAYERS[i % PAYERS.length] as readonly [string, string];
  return [
    `MSH|^~\\&|SMILECLOUD|BSD-MAIN|ELIG|BSD|20261123090000||SIU^S12^SIU_S12|K${i}|P|2.5.1`,
    `SCH|APT-K${i}^SC||||||||||^^^202612150900`,
    `PID|1||PK-${i}^^^SC^MR||PATIENT${i}^TEST||19800102|F`,
    segment('IN1', { 1: '1', 3: payerId, 4: payerName, 17: 'SEL', 36: `SBX-COMPLETE-${i}` }),
  ].join('\r');
}

export interface Serve {
  child: ChildProcess;
  mllpPort: number;
  httpPort: number;
  exited: Promise<number | null>;
  stderr: string[];
}

export function startServe(dataDir: string, env: NodeJS.ProcessEnv, extra: string[] = []): Promise<Serve> {
  const child = spawn(process.execPath, [bin, 'serve', '--config', path.join(dataDir, 'config.json'), '--data-dir', dataDir, '--mllp-port', '0', '--http-port', '0', ...extra], {
    cwd: projectRoot,
    env: { PATH: process.env.PATH, ...env },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  const stderr: string[] = [];
  child.stderr?.on('data', (d: Buffer) => stderr.push(d.toString()));
  const exited = new Promise<number | null>((resolve) => child.once('exit', (code) => resolve(code)));
  return new Promise((resolve, reject) => {
    let out = '';
    const timer = setTimeout(() => reject(new Error(`serve did not start: ${stderr.join('').slice(0, 500)}`)), 20_000);
    child.stdout?.on('data', (d: Buffer) => {
      out += d.toString();
      const mllp = /listening: mllp 127\.0\.0\.1:(\d+)/.exec(out);
      const http = /listening: http 127\.0\.0\.1:(\d+)/.exec(out);
      if (mllp && http) {
        clearTimeout(timer);
        resolve({ child, mllpPort: Number(mllp[1]), httpPort: Number(http[1]), exited, stderr });
      }
    });
    void exited.then((code) => reject(new Error(`serve exited with ${code}: ${stderr.join('').slice(0, 500)}`)));
  });
}

