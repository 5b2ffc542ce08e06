import { mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import * as path from 'node:path';
import { Readable } from 'node:stream';
import type { Command } from 'commander';
import { buildProgram } from '../src/cli/main';
import { projectRoot } from '../src/mapping-files';

const readme = readFileSync(path.join(projectRoot, 'README.md'), 'utf8');

/** The README's shell lines that run the CLI, continuations joined, comments and env prefixes dropped. */
function cliLines(): string[][] {
  const blocks = [...readme.matchAll(/```sh\n([\s\S]*?)```/g)].map((m) => m[1] ?? '');
  const joined = blocks.flatMap((b) => b.replace(/\\\n\s*/g, ' ').split('\n'));
  return joined
    .map((line) => tokens(line.replace(/\s+#.*$/, '')))
    .map((words) => words.slice(words.findIndex((w) => w === 'dental-elig') + 1))
    .filter((_, i) => joined[i]?.includes('npx dental-elig'));
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
    if (word.startsWith('-')) {
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

  it('names only commands and options the CLI has', () => {
    const lines = cliLines();
    expect(lines.length).toBeGreaterThan(15);
    expect(lines.flatMap(unknownParts)).toEqual([]);
  });

  it('runs the library example as written', () => {
    const example = /<!-- example: library -->\n```ts\n([\s\S]*?)```/.exec(readme)?.[1];
    expect(example).toBeDefined();
    const file = path.join(mkdtempSync(path.join(tmpdir(), 'readme-')), 'example.ts');
    writeFileSync(file, example ?? '');
    const { result } = require(file) as { result: { externalId: string; outcome: string; issues: unknown[] } };
    expect(result.externalId).toMatch(/^elig_[0-9a-f]{32}$/);
    expect(result.outcome).toBe('complete');
    expect(result.issues).toEqual([]);
  });
});
