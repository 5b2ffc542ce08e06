/**
 * The delimiters a message declares in MSH-1 and MSH-2. An acknowledgement answers in the same
 * ones, so they are kept exactly as received, including the v2.7 truncation character.
 */
export interface Delimiters {
  field: string;
  component: string;
  repetition: string;
  escape: string;
  subcomponent: string;
  /** MSH-2 as received (4 characters, 5 from v2.7 with the truncation character). */
  encodingCharacters: string;
}

export const DEFAULT_DELIMITERS: Delimiters = {
  field: '|',
  component: '^',
  repetition: '~',
  escape: '\\',
  subcomponent: '&',
  encodingCharacters: '^~\\&',
};

/**
 * Reads MSH-1 and MSH-2 from the first segment; undefined when they are not usable. Three
 * encoding characters (no subcomponent separator) are accepted, as old senders write them.
 */
export function readDelimiters(firstSegment: string): Delimiters | undefined {
  if (!firstSegment.startsWith('MSH') || firstSegment.length < 4) return undefined;
  const field = firstSegment.charAt(3);
  const end = firstSegment.indexOf(field, 4);
  const encoding = end === -1 ? firstSegment.slice(4) : firstSegment.slice(4, end);
  if (/[A-Za-z0-9\s]/.test(field) || encoding.length < 3 || encoding.length > 5) return undefined;
  const chars = [field, ...encoding.slice(0, 4)];
  if (new Set(chars).size !== chars.length || /[A-Za-z0-9\s]/.test(encoding)) return undefined;
  return {
    field,
    component: encoding.charAt(0),
    repetition: encoding.charAt(1),
    escape: encoding.charAt(2),
    // Without one declared, '&' is ordinary text; an unused control character keeps it that way.
    subcomponent: encoding.charAt(3) || '\u0000',
    encodingCharacters: encoding,
  };
}

/** Escapes text for a field written with these delimiters (HL7 \F\ \S\ \R\ \T\ \E\). */
export function escapeText(text: string, d: Delimiters): string {
  const table = new Map<string, string>([
    [d.escape, 'E'],
    [d.field, 'F'],
    [d.component, 'S'],
    [d.repetition, 'R'],
    [d.subcomponent, 'T'],
  ]);
  let out = '';
  for (const ch of text.replace(/[\r\n]+/g, ' ')) {
    const code = table.get(ch);
    out += code === undefined ? ch : `${d.escape}${code}${d.escape}`;
  }
  return out;
}
