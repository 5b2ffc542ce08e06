import * as z from 'zod';
import { ConfigError } from '../../config-error';
import { describeIssue } from '../../domain/issues';

/** The base a mapping file hangs its local URLs off (systems, extensions). */
export const BaseUrl = z.url({ error: 'must be an absolute URL' });

/**
 * The file's base, or the environment variable that moves it to a canonical the operator owns,
 * checked as the file's is and naming the variable only; ending in a slash. Read once, with the
 * file, by its caller: the URLs built on it are made for every coding and extension written.
 */
export function baseUrl(fileBase: string, variable: string): string {
  const override = process.env[variable];
  let base = fileBase;
  if (override !== undefined) {
    const parsed = BaseUrl.safeParse(override);
    if (!parsed.success) throw new ConfigError(describeIssue(parsed.error, variable));
    base = parsed.data;
  }
  return base.endsWith('/') ? base : `${base}/`;
}
