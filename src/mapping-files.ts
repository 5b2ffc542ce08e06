import { readFileSync } from 'node:fs';
import * as path from 'node:path';
import type * as z from 'zod';
import { ConfigError } from './config-error';
import { utf8Text, UTF16_REFUSED } from './text-file';
import { describeIssue } from './domain/issues';

/** The repository root, the same from src/ (tests) and dist/ (the built CLI). */
export const projectRoot = path.resolve(__dirname, '..');

/**
 * mappings/ holds data, not code. An integrator may point DENTAL_ELIG_MAPPINGS at a copy of
 * their own; every file is validated when it is read, so a bad edit fails at start-up with the
 * file and field named, not mid-message.
 */
export function mappingsDir(): string {
  return process.env.DENTAL_ELIG_MAPPINGS ?? path.join(projectRoot, 'mappings');
}

export function readMappingFile<T extends z.ZodType>(relativePath: string, schema: T, dir = mappingsDir()): z.infer<T> {
  const read = readAs(path.join(dir, relativePath), schema);
  if (read.ok) return read.data;
  // A copy made for an earlier version lacks the files and fields later ones added: one restart per
  // missing field would find them, where comparing the copy with this version's folder finds them all.
  const shipped = path.join(projectRoot, 'mappings');
  const copy = path.resolve(dir) !== shipped && readAs(path.join(shipped, relativePath), schema).ok;
  throw new ConfigError(`mappings/${relativePath}: ${read.problem}${copy ? ` (a copy of mappings/ lacking what this version's own has? compare it with ${shipped})` : ''}`);
}

function readAs<T extends z.ZodType>(file: string, schema: T): { ok: true; data: z.infer<T> } | { ok: false; problem: string } {
  let raw: unknown;
  try {
    const text = utf8Text(readFileSync(file));
    if (text === undefined) return { ok: false, problem: UTF16_REFUSED };
    raw = JSON.parse(text);
  } catch (err) {
    return { ok: false, problem: `cannot be read as JSON (${(err as Error).message})` };
  }
  const parsed = schema.safeParse(raw);
  return parsed.success ? { ok: true, data: parsed.data } : { ok: false, problem: describeIssue(parsed.error) };
}
