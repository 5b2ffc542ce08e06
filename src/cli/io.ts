import * as path from 'node:path';
import { Option, type Command } from 'commander';
import type { Readable } from 'node:stream';
import { IsoInstant } from '../domain/primitives';
import { describeJsonSyntax } from '../verification/json-syntax';
import type { VerificationClient } from '../verification/client';
import { PayerCatalog } from '../verification/payer-catalog';
import type { Page, PageQuery } from '../verification/wire';
import { utf8Text, UTF16_REFUSED } from '../text-file';

/** Where a command reads and writes; the real process in production, buffers in tests. */
export interface CliIo {
  stdout: { write(chunk: string): unknown };
  stderr: { write(chunk: string): unknown };
  stdin: Readable;
  env: NodeJS.ProcessEnv;
  /** Stops long-running commands (`sandbox`); when absent they stop on SIGINT or SIGTERM. */
  signal?: AbortSignal;
}

/**
 * The CLI's one error type: a single line for stderr, no stack trace, never patient data or a
 * secret. `exitCode` 1 is bad input or a failed operation, 2 a usage error (as is a ConfigError: see runCli).
 */
export class CliError extends Error {
  constructor(
    message: string,
    readonly exitCode = 1,
  ) {
    super(message);
    this.name = 'CliError';
  }
}

/**
 * Text for a terminal: line breaks and the other control characters (escape sequences among them)
 * become spaces. What the CLI quotes (the service's problem details, a status it sent, a name in a
 * file) then stays on its line and cannot move the cursor, recolour or clear the screen.
 */
export function printable(text: string): string {
  return text.replace(/[\p{Cc}\u2028\u2029]+/gu, ' ');
}

/** The outputs whose stderr has a progress line under way (progressLine): a line said meanwhile starts on a line of its own. */
const openLines = new WeakSet<CliIo>();

/** One line on stderr, `dental-elig: ` before it: an error, a warning or a note. */
export function say(io: CliIo, text: string): void {
  if (openLines.delete(io)) io.stderr.write('\n');
  io.stderr.write(`dental-elig: ${printable(text)}\n`);
}

/**
 * A line on stderr that shows a wait as it goes: `head`, then each word `run` adds. It is ended
 * however the wait ends, so the line of a failure (or of a retry's warning) is one of its own.
 */
export async function progressLine<T>(io: CliIo, head: string, run: (add: (word: string) => void) => Promise<T>): Promise<T> {
  io.stderr.write(printable(head));
  openLines.add(io);
  try {
    return await run((word) => {
      io.stderr.write(openLines.has(io) ? ` ${printable(word)}` : printable(word));
      openLines.add(io);
    });
  } finally {
    if (openLines.delete(io)) io.stderr.write('\n');
  }
}

/** Reads a file argument, `-` meaning standard input. */
export async function readInput(io: CliIo, file: string): Promise<string> {
  const text = utf8Text(await readInputBytes(io, file));
  if (text === undefined) throw new CliError(`${inputName(file)}: ${UTF16_REFUSED}`);
  return text;
}

/** readInput's bytes, for text whose character set the text itself names (an HL7 message's MSH-18). */
export async function readInputBytes(io: CliIo, file: string): Promise<Buffer> {
  if (file === '-') {
    const chunks: Buffer[] = [];
    for await (const chunk of io.stdin) chunks.push(Buffer.isBuffer(chunk) ? chunk : Buffer.from(String(chunk)));
    return Buffer.concat(chunks);
  }
  const { readFile } = await import('node:fs/promises');
  try {
    return await readFile(file);
  } catch (err) {
    const code = (err as NodeJS.ErrnoException).code;
    throw new CliError(`${file}: ${code === 'ENOENT' ? 'no such file' : `cannot be read (${code ?? 'error'})`}`);
  }
}

/** How messages name an input: the file as given, or stdin for `-`. */
export const inputName = (file: string) => (file === '-' ? 'stdin' : file);

/** Parses JSON input; a failure names the file, line, column and problem, never the content. */
export function parseJsonInput(text: string, file: string): unknown {
  try {
    return JSON.parse(text);
  } catch {
    throw new CliError(`${inputName(file)}: ${describeJsonSyntax(text)}`);
  }
}

/** A saved payer catalog (written by `setup payers sync`); entries it cannot read are left out, and said so on stderr. */
export async function loadCatalog(io: CliIo, file: string): Promise<PayerCatalog> {
  const unreadable = (found: string[]) => warnUnreadable(io, found, `the entries of the saved payer catalog ${path.basename(file)}`);
  try {
    return await PayerCatalog.load(file, undefined, { unreadable });
  } catch (err) {
    throw new CliError(`${(err as Error).message}; \`dental-elig setup payers sync\` writes one`);
  }
}

/** An option parser for whole numbers; anything else is a usage error naming the option. */
export const whole = (name: string) => (value: string): number => {
  if (!/^\d+$/.test(value)) throw new CliError(`${name}: must be a whole number`, 2);
  return Number(value);
};

/** An option parser for a port to listen on (0: any free port); anything else is a usage error naming the option. */
/**
 * A polling command's --first-delay-ms (hidden: the wait before the first poll, `firstDelayMs` by
 * default, which the service asks to be 3000 or more; lower only against the sandbox) and
 * --timeout-ms, after its --wait.
 */
export function waitOptions(cmd: Command, firstDelayMs: number): Command {
  return cmd
    .addOption(new Option('--first-delay-ms <ms>', 'with --wait: delay before the first poll').argParser(whole('--first-delay-ms')).default(firstDelayMs).hideHelp())
    .option('--timeout-ms <ms>', 'with --wait: give up waiting after this long', whole('--timeout-ms'), 5 * 60_000);
}

export const port = (name: string) => (value: string): number => {
  const n = whole(name)(value);
  if (n > 65535) throw new CliError(`${name}: must be a port, 0 to 65535`, 2);
  return n;
};

/** An option parser for an ISO 8601 instant with offset, e.g. --received-at. */
export const instant = (name: string) => (value: string): string => {
  if (!IsoInstant.safeParse(value).success) throw new CliError(`${name}: must be an ISO 8601 date-time with offset`, 2);
  return value;
};

/** Every item of a listing; items the service gave that could not be read are left out, and said so on stderr. */
export async function listAll<T>(io: CliIo, client: VerificationClient, list: (page: PageQuery) => Promise<Page<T>>): Promise<T[]> {
  const unreadable: string[] = [];
  const out: T[] = [];
  for await (const item of client.all(list, { unreadable: (found) => unreadable.push(...found) })) out.push(item);
  warnUnreadable(io, unreadable);
  return out;
}

/** One stderr line for the items of a listing (or of a saved copy) that could not be read: how many, and where the first one failed. */
export function warnUnreadable(io: CliIo, unreadable: readonly string[], of = 'the items the service listed'): void {
  if (unreadable.length === 0) return;
  const more = unreadable.length > 1 ? ` (+${unreadable.length - 1} more)` : '';
  say(io, `warning: ${unreadable.length} of ${of} could not be read and are left out: ${unreadable[0]}${more}`);
}

export function writeJson(io: CliIo, value: unknown): void {
  io.stdout.write(`${JSON.stringify(value, null, 2)}\n`);
}
