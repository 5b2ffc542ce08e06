import { Readable } from 'node:stream';
import { runCli } from '../../src/cli/main';

export interface CliRun {
  code: number;
  stdout: string;
  stderr: string;
}

/** Runs the CLI in-process with captured output; `env` replaces the process environment. */
export async function cli(argv: string[], env: NodeJS.ProcessEnv = {}, stdin = ''): Promise<CliRun> {
  let stdout = '';
  let stderr = '';
  const code = await runCli(argv, {
    stdout: { write: (s: string) => (stdout += s) },
    stderr: { write: (s: string) => (stderr += s) },
    stdin: Readable.from([stdin]),
    env,
  });
  return { code, stdout, stderr };
}
