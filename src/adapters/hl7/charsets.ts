import { z } from 'zod';

/** The character sets MSH-18 may name that this plugin reads, by table 0211's name or a platform's. */

/**
 * The table 0211 values read, and how Node reads and writes each. 'latin1' stands for a set of one
 * byte a character, read as Windows-1252 (see windows1252 in service/hl7-charset).
 */
export const ENCODINGS = {
  // HL7's default when MSH-18 is empty. Senders that say ASCII often send Latin-1 bytes anyway,
  // and reading every byte as Latin-1 keeps them instead of turning them into replacement marks.
  ASCII: 'latin1',
  '8859/1': 'latin1',
  'UNICODE UTF-8': 'utf8',
  // The v2.3 name for ISO 10646; over MLLP only its UTF-8 form is possible (UTF-16 bytes would
  // hold VT and FS), and that is what senders that write UNICODE send.
  UNICODE: 'utf8',
} as const satisfies Record<string, BufferEncoding>;

export const hl7CharsetSchema = z.enum(Object.keys(ENCODINGS) as [keyof typeof ENCODINGS, ...Array<keyof typeof ENCODINGS>]);
export type Hl7Charset = z.infer<typeof hl7CharsetSchema>;

/**
 * The names senders write in MSH-18 for these sets other than table 0211's, as their platform
 * names them (Java, .NET, IANA): an engine whose MSH-18 says UTF-8 has no setting to say otherwise,
 * and was refused every message, where a set's name is a set's name. Compared in upper case
 * without spaces, hyphens and underscores.
 */
const ALIASES: Readonly<Record<string, Hl7Charset>> = {
  UTF8: 'UNICODE UTF-8',
  ISO88591: '8859/1',
  LATIN1: '8859/1',
  WINDOWS1252: '8859/1',
  CP1252: '8859/1',
  USASCII: 'ASCII',
};

/**
 * MSH-18 as the set it names; '' when empty, undefined when it names none read here. The MLLP
 * listener decodes a frame by it and the parser reads hex escapes by it: one reading, so the two agree.
 */
export function charsetNamed(value: string): Hl7Charset | '' | undefined {
  const named = value.toUpperCase();
  if (named === '') return '';
  return hl7CharsetSchema.safeParse(named).success ? (named as Hl7Charset) : ALIASES[named.replace(/[\s_-]/g, '')];
}
