import type * as z from 'zod';

/**
 * A zod failure as one line, `path: message`, naming `root` when the whole value is wrong; `within`
 * is where the value sits in a larger one (`items.3` of a page).
 */
export function describeIssue(error: z.ZodError, root = '(root)', within: readonly PropertyKey[] = []): string {
  const issue = error.issues[0];
  return `${[...within, ...(issue?.path ?? [])].map(String).join('.') || root}: ${issue?.message ?? 'invalid'}`;
}

/** A field-level failure as problem details carry it on a 422. */
export type FieldFailure = {
  field: string;
  message: string;
  code: 'required' | 'unknown_field' | 'invalid_value';
};

/**
 * zod issues as problem-details errors[], in the service's vocabulary: a missing value is
 * `required`, an unexpected key `unknown_field` (one entry per key), anything else
 * `invalid_value`. The field is the dotted path (`patient.dateOfBirth`); the message never
 * repeats the value, which may be patient data. The client's own pre-send checks, the webhook
 * receiver and the sandbox all report this way, so a caller handles one shape.
 */
export function fieldErrors(issues: readonly z.core.$ZodIssue[], input: unknown): FieldFailure[] {
  const out: FieldFailure[] = [];
  for (const issue of issues) {
    if (issue.code === 'unrecognized_keys') {
      for (const key of issue.keys) out.push({ field: dotted([...issue.path, key]), code: 'unknown_field', message: 'is not a field of this request' });
      continue;
    }
    const field = dotted(issue.path) || 'body';
    if (issue.code === 'invalid_type' && valueAt(input, issue.path) === undefined) out.push({ field, code: 'required', message: 'is required' });
    else out.push({ field, code: 'invalid_value', message: issue.message });
  }
  return out;
}

const dotted = (path: readonly PropertyKey[]) => path.map(String).join('.');

/** What is at `path` in a parsed JSON value: undefined past the end of what it holds. */
export function valueAt(input: unknown, path: readonly PropertyKey[]): unknown {
  let at: unknown = input;
  for (const key of path) {
    if (typeof at !== 'object' || at === null) return undefined;
    at = (at as Record<PropertyKey, unknown>)[key];
  }
  return at;
}
