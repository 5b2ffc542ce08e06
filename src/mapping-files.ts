import { readFileSync } from 'node:fs';
import * as path from 'node:path';
import type * as z from 'zod';
import { ConfigError } from './config-error';
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
  const file = path.join(dir, relativePath);
  let raw: unknown;
  try {
    raw = JSON.parse(readFileSync(file, 'utf8'));
  } catch (err) {
    throw new ConfigError(`mappings/${relativePath}: cannot be read as JSON (${(err as Error).message})`);
  }
  const parsed = schema.safeParse(raw);
  if (!parsed.success) {
    throw new ConfigError(`mappings/${relativePath}: ${describeIssue(parsed.error)}`);
  }
  return parsed.data;
}
