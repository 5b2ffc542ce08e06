/** An error's first line, without anything it may quote from a body. */
export function errorText(err: unknown): string {
  const text = err instanceof Error ? err.message : String(err);
  return text.split('\n')[0]?.slice(0, 300) ?? 'error';
}
