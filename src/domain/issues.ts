import type * as z from 'zod';

/** A zod failure as one line, `path: message`, naming `root` when the whole value is wrong. */
export function describeIssue(error: z.ZodError, root = '(root)'): string {
  const issue = error.issues[0];
  return `${issue?.path.map(String).join('.') || root}: ${issue?.message ?? 'invalid'}`;
}

/** A zod failure as problem-details field errors, one per issue. */
export function fieldErrors(error: z.ZodError, root = '(body)'): Array<{ field: string; message: string; code: string }> {
  return error.issues.map((i) => ({ field: i.path.map(String).join('.') || root, message: i.message, code: i.code }));
}
