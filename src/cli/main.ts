import { readFileSync } from 'node:fs';
import * as path from 'node:path';
import { Command, CommanderError } from 'commander';
import { projectRoot } from '../mapping-files';
import { ConfigError } from '../config-error';
import { registerConvertFhir } from './convert-fhir';
import { registerConvertHl7 } from './convert-hl7';
import { registerDemo } from './demo';
import { registerFhirServer } from './fhir-server';
import { CliError, say, type CliIo } from './io';
import { registerJobs } from './jobs';
import { registerSandbox } from './sandbox';
import { registerServe } from './serve';
import { registerSetup } from './setup';
import { registerVerify } from './verify';

/** Builds the `dental-elig` program; each command group registers itself from its own module. */
export function buildProgram(io: CliIo): Command {
  const program = new Command('dental-elig')
    .description('Dental insurance eligibility: verification service setup, conversion and sync')
    .version(packageVersion(), '--version', 'print the version')
    .exitOverride()
    // Commander's own usage errors (an unknown option, a missing argument) are one line as every other of the CLI's is:
    // its suggestion (Did you mean --json?) on a line of its own went without the prefix, and it echoes what was typed.
    .configureOutput({ writeOut: (s) => io.stdout.write(s), writeErr: (s) => io.stderr.write(s), outputError: (s) => say(io, s.trimEnd()) })
    .option('--config <file>', `settings file (default: DENTAL_ELIG_CONFIG or ./dental-elig.config.json)`);
  registerSetup(program, io);
  registerVerify(program, io);
  registerSandbox(program, io);
  registerServe(program, io);
  registerJobs(program, io);
  registerFhirServer(program, io);
  registerDemo(program, io);
  const convert = program.command('convert').description('Convert input without sending anything');
  registerConvertHl7(convert, io);
  registerConvertFhir(convert, io);
  return program;
}

function packageVersion(): string {
  const pkg = JSON.parse(readFileSync(path.join(projectRoot, 'package.json'), 'utf8')) as { version?: unknown };
  return typeof pkg.version === 'string' ? pkg.version : 'unknown';
}

/** Runs the CLI in-process and returns the exit code; tests call this directly. */
export async function runCli(argv: string[], io: CliIo): Promise<number> {
  const program = buildProgram(io);
  try {
    await program.parseAsync(argv, { from: 'user' });
    return 0;
  } catch (err) {
    if (err instanceof CommanderError) return err.exitCode === 0 ? 0 : 2;
    // A setting that cannot be used (config file, environment) is a usage error, whichever command read it.
    if (err instanceof ConfigError) {
      say(io, err.message);
      return 2;
    }
    if (err instanceof CliError) {
      say(io, err.message);
      return err.exitCode;
    }
    // Unexpected: still one line, no stack trace (it could carry request data).
    say(io, `internal error: ${err instanceof Error ? err.message.split('\n')[0] : String(err)}`);
    return 1;
  }
}

export function main(): void {
  // A reader that stops reading (`jobs list --json | head`) ends what is printed, not the command with
  // a stack trace; serve goes on when whatever read its `listening:` lines has gone.
  process.stdout.on('error', (err: NodeJS.ErrnoException) => {
    if (err.code !== 'EPIPE') throw err;
  });
  runCli(process.argv.slice(2), { stdout: process.stdout, stderr: process.stderr, stdin: process.stdin, env: process.env }).then(
    (code) => {
      process.exitCode = code;
    },
  );
}
