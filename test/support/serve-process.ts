import { spawn, type ChildProcess } from 'node:child_process';
import * as path from 'node:path';
import { projectRoot } from '../../src/mapping-files';

/** `dental-elig serve` as its own process, as production runs it. */
export const bin = path.join(projectRoot, 'bin', 'dental-elig.js');
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
    // As README deploys it: without the limit, serve on Node 24 starts with a warning advising it.
    env: { PATH: process.env.PATH, NODE_OPTIONS: '--max-semi-space-size=16', ...env },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  const stderr: string[] = [];
  child.stderr?.on('data', (d: Buffer) => stderr.push(d.toString()));
  const exited = new Promise<number | null>((resolve) => child.once('exit', (code) => resolve(code)));
  return new Promise((resolve, reject) => {
    let out = '';
    const timer = setTimeout(() => {
      // Not left running behind the test that gives up on it.
      child.kill('SIGKILL');
      reject(new Error(`serve did not start: ${stderr.join('').slice(0, 500)}`));
    }, 20_000);
    child.stdout?.on('data', (d: Buffer) => {
      out += d.toString();
      const mllp = /listening: mllp 127\.0\.0\.1:(\d+)/.exec(out);
      const http = /listening: http 127\.0\.0\.1:(\d+)/.exec(out);
      if (mllp && http) {
        clearTimeout(timer);
        resolve({ child, mllpPort: Number(mllp[1]), httpPort: Number(http[1]), exited, stderr });
      }
    });
    void exited.then((code) => {
      clearTimeout(timer);
      reject(new Error(`serve exited with ${code}: ${stderr.join('').slice(0, 500)}`));
    });
  });
}

