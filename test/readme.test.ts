import { spawn, type ChildProcess } from 'node:child_process';
import { existsSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import * as path from 'node:path';
import { Readable } from 'node:stream';
import type { Command } from 'commander';
import * as z from 'zod';
import { buildProgram } from '../src/cli/main';
import { ConfigFile } from '../src/service/config-file';
import { SyncSettings } from '../src/service/eligibility-sync';
import { projectRoot } from '../src/mapping-files';

const readme = readFileSync(path.join(projectRoot, 'README.md'), 'utf8');

/** The README's shell lines that run the CLI, continuations joined, comments and env prefixes dropped. */
function cliLines(): string[][] {
  const blocks = [...readme.matchAll(/```sh\n([\s\S]*?)```/g)].map((m) => m[1] ?? '');
  const joined = blocks.flatMap((b) => b.replace(/\\\n\s*/g, ' ').split('\n'));
  return joined
    .filter((line) => line.includes('npx dental-elig'))
    .flatMap((line) => line.replace(/\s+#.*$/, '').split(' | '))
    .map((part) => tokens(part))
    .map((words) => words.slice(words.findIndex((w) => w === 'dental-elig') + 1));
}

function tokens(line: string): string[] {
  return [...line.matchAll(/'([^']*)'|"([^"]*)"|(\S+)/g)].map((m) => m[1] ?? m[2] ?? m[3] ?? '');
}

const io = { stdout: { write: () => true }, stderr: { write: () => true }, stdin: Readable.from([]), env: {} };

/** Walks the command tree as commander would, returning what does not exist. */
function unknownParts(words: string[]): string[] {
  let command: Command = buildProgram(io);
  const known = (c: Command, flag: string) =>
    [c, ...ancestors(c)].some((x) => x.options.some((o) => o.long === flag || o.short === flag || (o.negate && o.long === flag)));
  const problems: string[] = [];
  for (const word of words) {
    if (word.startsWith('-') && word !== '-') {
      if (!known(command, word.split('=')[0] ?? word)) problems.push(`${command.name()}: unknown option ${word}`);
      continue;
    }
    const sub = command.commands.find((c) => c.name() === word) ?? defaultSubcommand(command);
    if (sub) command = sub;
  }
  if (command.commands.length > 0) problems.push(`${command.name()}: names a group, not a command`);
  return problems;
}

/** `verify FILE` runs `verify send FILE`: commander keeps the default's name in a private field. */
function defaultSubcommand(c: Command): Command | undefined {
  const name = (c as unknown as { _defaultCommandName?: string })._defaultCommandName;
  return name ? c.commands.find((x) => x.name() === name) : undefined;
}

function ancestors(c: Command): Command[] {
  const out: Command[] = [];
  for (let p = c.parent; p; p = p.parent) out.push(p);
  return out;
}

describe('README', () => {
  it('opens with the two commands for a fresh machine, and .ci/run calls the test command', () => {
    const first = /```sh\n(.*)\n(.*)\n```/.exec(readme);
    expect(first?.[1]).toMatch(/^npm ci && npm start\s+#/);
    expect(first?.[2]).toMatch(/^npm test\s+#/);
    const ci = readFileSync(path.join(projectRoot, '.ci', 'run'), 'utf8');
    expect(ci).toMatch(/^npm ci\b/m);
    expect(ci).toMatch(/^npm test$/m);
  });

  it('keeps no merge conflict left in it: a table row said twice, one of them stale', () => {
    expect(readme).not.toMatch(/^(<{7}|={7}|>{7})( |$)/m);
  });

  it('names every key the config file takes, serve\'s settings among them', () => {
    // The keys a secret would go in are refused by name, not taken.
    const taken = Object.entries(ConfigFile.shape).filter(([key, schema]) => key !== '$comment' && !(schema.unwrap() instanceof z.ZodNever));
    const keys = [...taken.map(([key]) => key), ...Object.keys(SyncSettings.shape)];
    expect(keys.length).toBeGreaterThan(30);
    expect(keys.filter((key) => !readme.includes(`\`${key}\``))).toEqual([]);
  });

  it('gives every folder of src/, and every module at its top, a place in Layout', () => {
    const layout = readme.slice(readme.indexOf('## Layout\n'), readme.indexOf('\n## ', readme.indexOf('## Layout\n') + 1));
    const src = path.join(projectRoot, 'src');
    const entries = (dir: string) => readdirSync(path.join(src, dir), { withFileTypes: true });
    const folders = ['', 'adapters'].flatMap((dir) => entries(dir).filter((e) => e.isDirectory()).map((e) => `\`src/${dir ? `${dir}/` : ''}${e.name}/\``));
    const modules = entries('').filter((e) => e.isFile()).map((e) => `\`${e.name}\``);
    expect(folders.length).toBeGreaterThan(7);
    expect([...folders, ...modules].filter((name) => !layout.includes(name))).toEqual([]);
  });

  it('names only commands and options the CLI has', () => {
    const lines = cliLines();
    expect(lines.length).toBeGreaterThan(15);
    expect(lines.flatMap(unknownParts)).toEqual([]);
  });

  it('gives --state with each `jobs retry` its prose narrows by kind, portal or clinic, as the CLI requires (exit 2 without)', () => {
    const narrowed = [...readme.matchAll(/`(?:npx dental-elig )?jobs retry ([^`]*)`/g)].map((m) => m[1] ?? '').filter((options) => /--(failure-kind|portal|clinic)\b/.test(options));
    expect(narrowed.length).toBeGreaterThan(1);
    expect(narrowed.filter((options) => !/--state\b/.test(options))).toEqual([]);
  });
});

/**
 * README's walkthrough and conversions, run as a person runs them: each sh line in order, the
 * built executable as a child process, in a fresh folder holding only a link to fixtures/. The
 * sandbox and the FHIR server start as README starts them, on port 0; the URL they print replaces
 * README's in the lines after. Each command must exit 0 and print what its `# ->` comment names;
 * the ids it prints fill the placeholders (ORG_ID, …) of the lines after.
 */
const bin = path.join(projectRoot, 'bin', 'dental-elig.js');

function section(title: string): string[] {
  const start = readme.indexOf(`## ${title}\n`);
  const end = readme.indexOf('\n## ', start + 1);
  const text = readme.slice(start, end === -1 ? undefined : end);
  return [...text.matchAll(/```sh\n([\s\S]*?)```/g)].map((m) => m[1] ?? '');
}

interface Run {
  code: number | null;
  stdout: string;
  stderr: string;
}

interface Walk {
  cwd: string;
  env: Record<string, string>;
  /** README's URL (host:port) → the one a server started on port 0 printed. */
  urls: Map<string, string>;
  ids: Map<string, string>;
  servers: ChildProcess[];
  ran: string[];
}

function runBin(walk: Walk, args: string[], env: Record<string, string>, input = ''): Promise<Run> {
  return new Promise((resolve) => {
    const child = spawn(process.execPath, [bin, ...args], { cwd: walk.cwd, env: { PATH: process.env.PATH ?? '', ...walk.env, ...env } });
    let stdout = '';
    let stderr = '';
    child.stdout.on('data', (d: Buffer) => (stdout += d.toString()));
    child.stderr.on('data', (d: Buffer) => (stderr += d.toString()));
    child.on('close', (code) => resolve({ code, stdout, stderr }));
    child.stdin.end(input);
  });
}

/** A long-running command (sandbox, fhir-server) on port 0; resolves with the URL it printed. */
function startServer(walk: Walk, args: string[]): Promise<string> {
  const child = spawn(process.execPath, [bin, ...args.map((a, i) => (args[i - 1] === '--port' ? '0' : a))], { cwd: walk.cwd, env: { PATH: process.env.PATH ?? '', ...walk.env } });
  walk.servers.push(child);
  return new Promise((resolve, reject) => {
    let out = '';
    child.stdout?.on('data', (d: Buffer) => {
      out += d.toString();
      const url = /^listening: \S+ (http:\/\/\S+)$/m.exec(out)?.[1];
      if (url) resolve(url);
    });
    child.on('close', (code) => reject(new Error(`${args.join(' ')} exited ${code} before listening`)));
  });
}

/** What `# -> a (X), b (Value), c (words)` asks: each named term printed; X captured; Value the last value shown. */
function checkOutput(walk: Walk, line: string, comment: string, stdout: string): void {
  const wants = comment.includes('->') ? comment.slice(comment.indexOf('->') + 2) : '';
  for (const m of wants.matchAll(/([A-Za-z]\w*)(?:\s*\(([^)]*)\))?/g)) {
    const [, term = '', note = ''] = m;
    expect({ line, printed: new RegExp(`\\b${term}\\b`).test(stdout) }).toEqual({ line, printed: true });
    const values = [...stdout.matchAll(new RegExp(`^${term}\\s+(\\S+)`, 'gm'))].map((v) => v[1] ?? '');
    if (/^[A-Z][A-Z_]+$/.test(note)) {
      expect({ line, [note]: values.at(-1) }).toEqual({ line, [note]: expect.stringMatching(/\S/) });
      walk.ids.set(note, values.at(-1) ?? '');
    } else if (/^\w+$/.test(note)) {
      expect({ line, [term]: values.at(-1) }).toEqual({ line, [term]: note });
    }
  }
}

async function walkBlocks(walk: Walk, blocks: string[]): Promise<void> {
  const lines = blocks.flatMap((b) => b.replace(/\\\n\s*/g, ' ').split('\n')).filter((l) => l.trim() !== '');
  for (const raw of lines) {
    const hash = raw.search(/\s#\s/);
    const comment = hash === -1 ? '' : raw.slice(hash + 3);
    let command = (hash === -1 ? raw : raw.slice(0, hash)).trim();
    for (const [from, to] of walk.urls) command = command.split(from).join(to);
    for (const [name, value] of walk.ids) command = command.replace(new RegExp(`\\b${name}\\b`, 'g'), value);
    expect({ line: raw, unfilled: /\b[A-Z]+_[A-Z_]*ID\b|\bREGISTERED_EMAIL\b/.exec(command.replace(/DENTAL_ELIG_\w+/g, ''))?.[0] }).toEqual({ line: raw, unfilled: undefined });
    walk.ran.push(command);

    const exported = /^export (\w+)=(\S+)$/.exec(command);
    if (exported) {
      walk.env[exported[1] as string] = exported[2] as string;
      continue;
    }
    const parts = command.split(' | ').map(tokens);
    const env: Record<string, string> = {};
    let input = '';
    let last: Run = { code: 0, stdout: '', stderr: '' };
    for (const words of parts) {
      const at = words.indexOf('npx');
      for (const assignment of words.slice(0, at)) {
        const [name, ...value] = assignment.split('=');
        env[name as string] = value.join('=');
      }
      expect(words[at + 1]).toBe('dental-elig');
      const args = words.slice(at + 2);
      if (args[0] === 'sandbox' || args[0] === 'fhir-server') {
        const shown = /listening: \S+ (http:\/\/\S+)/.exec(comment)?.[1];
        expect({ line: raw, shown }).toEqual({ line: raw, shown: expect.stringMatching(/^http:/) });
        const url = await startServer(walk, args);
        walk.urls.set(new URL(shown as string).host, new URL(url).host);
        expect(new URL(url).pathname).toBe(new URL(shown as string).pathname);
        continue;
      }
      last = await runBin(walk, args, env, input);
      expect({ line: raw, code: last.code, stderr: last.code === 0 ? '' : last.stderr }).toEqual({ line: raw, code: 0, stderr: '' });
      input = last.stdout;
    }
    checkOutput(walk, raw, comment, last.stdout);
  }
}

function freshWalk(): Walk {
  const cwd = mkdtempSync(path.join(tmpdir(), 'readme-walk-'));
  symlinkSync(path.join(projectRoot, 'fixtures'), path.join(cwd, 'fixtures'));
  return { cwd, env: {}, urls: new Map(), ids: new Map(), servers: [], ran: [] };
}

async function finish(walk: Walk): Promise<void> {
  await Promise.all(
    walk.servers.map((s) => (s.exitCode !== null ? undefined : new Promise<void>((resolve) => (s.once('close', () => resolve()), s.kill('SIGTERM'))))),
  );
  rmSync(walk.cwd, { recursive: true, force: true });
}

describe('README, run as written against servers it starts', () => {
  beforeAll(() => {
    if (!existsSync(path.join(projectRoot, 'dist', 'cli', 'main.js'))) throw new Error('dist/ is missing: run `npm ci` or `npm run build` first');
  });

  it('onboards a practice and verifies, command by command, each id taken from what the command before printed', async () => {
    const walk = freshWalk();
    try {
      await walkBlocks(walk, section('Onboarding a practice'));
      expect(walk.ran.filter((c) => c.includes('npx dental-elig'))).toHaveLength(14);
      expect([...walk.ids.keys()].sort()).toEqual(['CLINIC_ID', 'CORRELATION_ID', 'ORG_ID', 'REGISTERED_EMAIL', 'REGISTRATION_ID']);
      expect(existsSync(path.join(walk.cwd, '.dental-elig', 'catalog.json'))).toBe(true);
    } finally {
      await finish(walk);
    }
  }, 90_000);

  it('converts input, in a folder where the walkthrough never ran, with only the sandbox and its exports', async () => {
    const walk = freshWalk();
    try {
      const [sandbox, exports] = section('Onboarding a practice');
      await walkBlocks(walk, [sandbox ?? '', exports ?? '']);
      await walkBlocks(walk, section('Converting input'));
      expect(walk.ran.filter((c) => c.includes('npx dental-elig convert'))).toHaveLength(6);
      expect([...walk.urls.keys()]).toEqual(['127.0.0.1:8089', '127.0.0.1:8080']);
    } finally {
      await finish(walk);
    }
  }, 60_000);

  it('runs the library example as README says: a project with the package installed, `node example.mjs`', async () => {
    const example = /<!-- example: library -->\n```ts\n([\s\S]*?)```/.exec(readme)?.[1];
    expect(example).toBeDefined();
    const walk = freshWalk();
    try {
      mkdirSync(path.join(walk.cwd, 'node_modules'));
      symlinkSync(projectRoot, path.join(walk.cwd, 'node_modules', 'dental-eligibility-sync'));
      writeFileSync(path.join(walk.cwd, 'example.mjs'), example ?? '');
      const run = await new Promise<Run>((resolve) => {
        const child = spawn(process.execPath, ['example.mjs'], { cwd: walk.cwd, env: { PATH: process.env.PATH ?? '' } });
        let stdout = '';
        let stderr = '';
        child.stdout.on('data', (d: Buffer) => (stdout += d.toString()));
        child.stderr.on('data', (d: Buffer) => (stderr += d.toString()));
        child.on('close', (code) => resolve({ code, stdout, stderr }));
      });
      expect(run.stderr).toBe('');
      expect(run.code).toBe(0);
      expect(run.stdout).toMatch(/externalId: 'elig_[0-9a-f]{32}'/);
      expect(run.stdout).toMatch(/outcome: 'complete'/);
      expect(run.stdout).toMatch(/issues: \[\]/);
    } finally {
      await finish(walk);
    }
  });
});
