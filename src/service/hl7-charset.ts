import { isUtf8 } from 'node:buffer';
import { z } from 'zod';
import { readDelimiters } from '../adapters/hl7/delimiters';
import { rejection, type Hl7Problem } from '../adapters/hl7/hl7-errors';
import { charsetNamed, ENCODINGS, hl7CharsetSchema, type Hl7Charset } from '../adapters/hl7/charsets';

/**
 * The character set of a frame. A frame is bytes; its text depends on MSH-18 (table 0211), which
 * can only be read once the bytes are text. MSH itself is ASCII, so it is read byte for byte
 * (latin1 maps each byte to one character) to find MSH-18, and the whole frame is then decoded in
 * the set MSH-18 names. Without MSH-18 the sender's configured set applies, then the default.
 * ACKs go back in the set the message came in, so echoed fields reach the sender as they left it.
 */

export const charsetOptionsSchema = z.object({
  /** For messages whose MSH-18 is empty and whose sender has no entry below. */
  defaultCharset: hl7CharsetSchema.default('UNICODE UTF-8'),
  /**
   * Per sender, for messages whose MSH-18 is empty: keyed by MSH-3 (first component), or by MSH-3
   * and MSH-4 joined with `|` (`MOLARPMS|BSD-MAIN`), which wins over MSH-3 alone.
   */
  senderCharsets: z.record(z.string().min(1), hl7CharsetSchema).default({}),
});
export type CharsetOptions = z.input<typeof charsetOptionsSchema>;
export type Charsets = z.infer<typeof charsetOptionsSchema>;

export type DecodedText =
  | { ok: true; text: string; encoding: BufferEncoding }
  /** Not decodable: the text is the bytes read one to a character, so nothing is lost or altered. */
  | { ok: false; text: string; encoding: BufferEncoding; problem: Hl7Problem };

export function decodeFrame(bytes: Buffer, charsets: Charsets): DecodedText {
  const header = readCharsetHeader(bytes);
  const named = charsetNamed(header?.charset ?? '');
  if (named === undefined) return undecodable(bytes, 'character set not supported (ASCII, 8859/1, UNICODE UTF-8)');
  const charset = named || senderCharset(header, charsets);
  const encoding = ENCODINGS[charset];
  if (encoding === 'utf8' && !isUtf8(bytes)) {
    return undecodable(bytes, named ? 'text is not valid UTF-8' : 'text is not valid UTF-8 and MSH-18 names no other character set');
  }
  return { ok: true, text: encoding === 'latin1' ? windows1252(bytes) : bytes.toString(encoding), encoding };
}

/**
 * A message in 8859/1 or ASCII is read as Windows-1252, as browsers read text labelled ISO-8859-1:
 * the PMSs that say so run on Windows and write its set, where 0x80-0x9F are the curly quotes and
 * dashes of O’Brien and Smith–Jones, and in ISO-8859-1 control characters no text holds. Read so,
 * the apostrophe was dropped with the control characters and the payer was asked for OBRIEN.
 * Node's TextDecoder reads windows-1252 as ISO-8859-1, hence the table (Unicode's CP1252.TXT); the
 * five bytes it leaves unassigned stay the control characters they were.
 */
const WINDOWS_1252 = '€\u0081‚ƒ„…†‡ˆ‰Š‹Œ\u008dŽ\u008f\u0090‘’“”•–—˜™š›œ\u009džŸ';

function windows1252(bytes: Buffer): string {
  const text = bytes.toString('latin1');
  return /[\u0080-\u009f]/.test(text) ? text.replace(/[\u0080-\u009f]/g, (ch) => WINDOWS_1252.charAt(ch.charCodeAt(0) - 0x80)) : text;
}

/** Those characters back to their byte, for an answer in the set a message came in. */
const WINDOWS_1252_BYTES = new Map(Array.from(WINDOWS_1252, (ch, i) => [ch, 0x80 + i] as const));

/** Text written in the set a frame was read in (decodeFrame's encoding). */
export function encodeText(text: string, encoding: BufferEncoding): Buffer {
  if (encoding !== 'latin1' || !/[^\u0000-\u00ff]/.test(text)) return Buffer.from(text, encoding);
  return Buffer.from(Array.from(text, (ch) => WINDOWS_1252_BYTES.get(ch) ?? ch.charCodeAt(0) & 0xff));
}

function senderCharset(header: CharsetHeader | undefined, charsets: Charsets): Hl7Charset {
  const { senderCharsets } = charsets;
  const bySender = header && (senderCharsets[`${header.application}|${header.facility}`] ?? senderCharsets[header.application]);
  return bySender ?? charsets.defaultCharset;
}

function undecodable(bytes: Buffer, reason: string): DecodedText {
  return { ok: false, text: bytes.toString('latin1'), encoding: 'latin1', problem: rejection({ segment: 'MSH', field: 18 }, 103, reason) };
}

interface CharsetHeader {
  /** MSH-18, first repetition (the set of the whole message; later ones are for escapes). */
  charset: string;
  /** MSH-3 and MSH-4, first components. */
  application: string;
  facility: string;
}

/** The first MSH segment of the frame (a batch begins with FHS or BHS), read byte for byte. */
function readCharsetHeader(bytes: Buffer): CharsetHeader | undefined {
  let start = bytes.indexOf('MSH');
  while (start > 0 && bytes[start - 1] !== 0x0d && bytes[start - 1] !== 0x0a) start = bytes.indexOf('MSH', start + 1);
  if (start === -1) return undefined;
  let end = start;
  while (end < bytes.length && bytes[end] !== 0x0d && bytes[end] !== 0x0a) end++;
  const line = bytes.toString('latin1', start, end);
  const delimiters = readDelimiters(line);
  if (!delimiters) return undefined;
  const fields = line.split(delimiters.field);
  // fields[0] is "MSH" and fields[1] MSH-2, so MSH-n is fields[n - 1].
  const first = (n: number, separator: string) => (fields[n - 1] ?? '').split(separator)[0]?.trim() ?? '';
  return { charset: first(18, delimiters.repetition), application: first(3, delimiters.component), facility: first(4, delimiters.component) };
}
