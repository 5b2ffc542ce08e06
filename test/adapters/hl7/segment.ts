/** Builds a segment from numbered fields, so a test says `36: 'M-1'` instead of counting bars. */
export function segment(name: string, fields: Record<number, string>): string {
  const last = Math.max(0, ...Object.keys(fields).map(Number));
  return [name, ...Array.from({ length: last }, (_, i) => fields[i + 1] ?? '')].join('|');
}
