import { Message } from 'node-hl7-client';
// Not through domain's index: its re-exports are getters, and every value read calls this.
import { withoutControlCharacters } from '../../domain/primitives';
import { charsetNamed, ENCODINGS } from './charsets';
import { readDelimiters, type Delimiters } from './delimiters';
import { Hl7InputError, rejection, type Hl7Problem } from './hl7-errors';
import { segmentLines } from './split-messages';

/**
 * A parsed message, read through node-hl7-client with its quirks kept out of sight:
 * - `message.get('IN1.4')` reads only the first IN1, so every segment is its own, in message
 *   order (an IN2 belongs to the IN1 before it);
 * - every node it builds (segment, field, repetition, component) is an EventEmitter, and reading
 *   a field through get() cost more than the rest of the adapter together: a segment's fields are
 *   cut from its text by the message's delimiters, and decoded with the escape decoding of the
 *   library's Message, once per value read;
 * - cut at the field separator, an MSH is shifted by one (MSH-1 is the separator itself);
 * - the parser takes any three characters as a segment name and refuses blank lines, so lines are
 *   normalised and names checked here first;
 * - it counts `MSH|` anywhere in the text as a message start, so a facility or any other field
 *   ending in MSH makes "Multiple MSH segments found": its Message is given the header's
 *   delimiters only.
 */
export class Hl7Segment {
  /** The segment without surrounding spaces, as the library's parser holds it, and where each field ends in it. */
  private text: string | undefined;
  private fieldEnds: number[] | undefined;
  /** Each field read so far. */
  private fieldTexts: Array<string | undefined> | undefined;
  /** Each field read so far, cut into its repetitions once: readers walk every repetition. */
  private repetitionTexts: Array<string[] | undefined> | undefined;
  private rawFields: string[] | undefined;
  /** Fields are numbered from the name, but MSH-1 is the separator that follows it. */
  private readonly shift: number;

  constructor(
    readonly name: string,
    /** Which occurrence of this segment name, from 1. */
    readonly sequence: number,
    /** The segment as received (still escaped), for copying fields into an acknowledgement. */
    readonly raw: string,
    private readonly decoder: Message,
    private readonly delimiters: Delimiters,
    /** Whether a hex escape's bytes are UTF-8 (MSH-18 UNICODE UTF-8 or empty), not one character each. */
    private readonly utf8Hex = false,
  ) {
    this.shift = name === 'MSH' ? 1 : 0;
  }

  /** A field, component and subcomponent (1-based) of a repetition (0-based); '' when absent. */
  value(field: number, component = 1, subcomponent = 1, repetition = 0): string {
    if (this.shift === 1 && field <= 2) {
      return component === 1 && subcomponent === 1 && repetition === 0 ? this.mshDelimiterField(field) : '';
    }
    const escaped = this.escaped(field, component, subcomponent, repetition);
    if (!escaped) return '';
    const decoded = unescape(this.decoder, this.utf8Hex ? utf8HexDecoded(escaped, this.delimiters.escape) : escaped, this.delimiters.escape);
    // A stray control character, raw or hex-escaped, is no part of a name or an id, and the chart's FHIR strings refuse it.
    const text = withoutControlCharacters(decoded);
    // "" is HL7's explicit null: the sender says there is no value.
    return text === '""' ? '' : text;
  }

  /**
   * Whether a datum of the first repetition is HL7's null (""), which value() reads as empty: the
   * sender says to delete what the receiver holds, where a datum left empty leaves it as it was.
   */
  isNull(field: number, component = 1, subcomponent = 1): boolean {
    return !(this.shift === 1 && field <= 2) && this.escaped(field, component, subcomponent, 0)?.trim() === '""';
  }

  /** A datum as it stands in the segment, escape sequences and all. */
  private escaped(field: number, component: number, subcomponent: number, repetition: number): string | undefined {
    // The first repetition is what nearly every read asks for: cut from the field, no array of repetitions.
    const rep = repetition === 0 ? piece(this.fieldText(field), this.delimiters.repetition, 0) : this.repetitionsOf(field)[repetition];
    const comp = rep && piece(rep, this.delimiters.component, component - 1);
    return comp && piece(comp, this.delimiters.subcomponent, subcomponent - 1);
  }

  /** Whether a field repeats: most do not, and a reader of repetitions then reads the first alone, splitting nothing. */
  repeats(field: number): boolean {
    return !(this.shift === 1 && field <= 2) && this.fieldText(field).includes(this.delimiters.repetition);
  }

  /** How many repetitions a field has (0 when empty). */
  repetitions(field: number): number {
    if (this.shift === 1 && field <= 2) return 1;
    return this.repetitionsOf(field).length;
  }

  /** Whether a field has something in it: not empty, nor HL7's null (""). */
  hasValue(field: number): boolean {
    if (this.shift === 1 && field <= 2) return true;
    const text = this.fieldText(field).trim();
    return text !== '' && text !== '""';
  }

  /** Whether no field after `field` has anything in it (the segment says nothing beyond its set id, say). */
  emptyAfter(field: number): boolean {
    this.fieldText(field);
    const last = (this.fieldEnds?.length ?? 0) - 1 + this.shift;
    for (let f = field + 1; f <= last; f++) if (this.hasValue(f)) return false;
    return true;
  }

  /** A field exactly as received, escape sequences and all; '' when absent. */
  rawField(field: number): string {
    if (this.shift === 1 && field === 1) return this.delimiters.field;
    this.rawFields ??= this.raw.split(this.delimiters.field);
    return this.rawFields[field - this.shift] ?? '';
  }

  /** A field's repetitions, cut once per field; components are cut out of a repetition on each read. */
  private repetitionsOf(field: number): string[] {
    this.repetitionTexts ??= [];
    const known = this.repetitionTexts[field];
    if (known) return known;
    const text = this.fieldText(field);
    // As the library splits: an empty field has no repetitions at all.
    const repetitions = text === '' ? [] : text.split(this.delimiters.repetition);
    this.repetitionTexts[field] = repetitions;
    return repetitions;
  }

  /**
   * A field's text. Readers look at a dozen of a segment's fields at most, so the segment is not
   * split: where each field ends is found once, and only the fields read are cut out.
   */
  private fieldText(field: number): string {
    if (this.text === undefined || this.fieldEnds === undefined) {
      const text = this.raw.trim();
      const ends: number[] = [];
      for (let at = text.indexOf(this.delimiters.field); at !== -1; at = text.indexOf(this.delimiters.field, at + 1)) ends.push(at);
      ends.push(text.length);
      this.text = text;
      this.fieldEnds = ends;
    }
    const index = field - this.shift;
    const end = this.fieldEnds[index];
    if (end === undefined || index < 1) return index === 0 ? this.name : '';
    this.fieldTexts ??= [];
    return (this.fieldTexts[index] ??= this.text.slice((this.fieldEnds[index - 1] as number) + 1, end));
  }

  private mshDelimiterField(field: number): string {
    return field === 1 ? this.delimiters.field : this.delimiters.encodingCharacters;
  }
}

/**
 * The library's escape decoding, except that it throws on a hex escape of odd length (\XABC\):
 * such an escape is dropped, as the escapes it does not support are.
 */
function unescape(decoder: Message, text: string, escape: string): string {
  // Nearly every value has no escape at all: the library would scan it to give it back as it is.
  if (!text.includes(escape)) return text;
  const plain = text.includes(`${escape}.`) ? withoutFormatting(text, escape) : text;
  try {
    return decoder.unescape(plain);
  } catch {
    const e = forRegExp(escape);
    const hex = new RegExp(`${e}X([^${e}]*)${e}`, 'g');
    return decoder.unescape(plain.replace(hex, (whole, digits: string) => (digits.length % 2 === 0 ? whole : '')));
  }
}

/**
 * Formatting commands (\.br\, \.sp\, \.in+4\, ...), which senders put in names and payer names as
 * well as in formatted text, as one space: the library leaves them in the value as written, so a
 * payer name sent as two lines reached the check as `Delta Dental\.br\PO Box 997330`. Escapes are
 * read from the left, as the library reads them, so the `\E\` of an escaped escape character
 * begins none.
 */
function withoutFormatting(text: string, escape: string): string {
  const e = forRegExp(escape);
  const marked = text.replace(new RegExp(`${e}[^${e}]*${e}`, 'g'), (sequence) => (sequence.charAt(1) === '.' ? '\u0000' : sequence));
  return marked.replace(/ *\u0000[\u0000 ]*/g, ' ');
}

/**
 * Hex escapes read as UTF-8 bytes (\XC3BC\ is ü), as a message in UNICODE UTF-8 means them; the
 * library gives each byte a character of its own. One whose bytes are no UTF-8, or whose text
 * holds the escape character, is left for the library.
 */
const UTF8 = new TextDecoder('utf-8', { fatal: false });

function utf8HexDecoded(text: string, escape: string): string {
  if (!text.includes(`${escape}X`)) return text;
  const e = forRegExp(escape);
  return text.replace(new RegExp(`${e}X((?:[0-9A-Fa-f]{2})+)${e}`, 'g'), (whole, hex: string) => {
    const decoded = UTF8.decode(Buffer.from(hex, 'hex'));
    return decoded.includes('\uFFFD') || decoded.includes(escape) ? whole : decoded;
  });
}

/** A delimiter as a regular expression matches it literally. */
function forRegExp(delimiter: string): string {
  return delimiter.replace(/[-/\\^$*+?.()|[\]{}]/g, '\\$&');
}

/** The index-th (0-based) piece of a text cut at a delimiter, as text.split(delimiter)[index] without the array. */
export function piece(text: string, delimiter: string, index: number): string | undefined {
  let start = 0;
  for (let i = 0; i < index; i++) {
    const next = text.indexOf(delimiter, start);
    if (next === -1) return undefined;
    start = next + 1;
  }
  const end = text.indexOf(delimiter, start);
  return end === -1 ? text.slice(start) : text.slice(start, end);
}

export class Hl7Message {
  constructor(
    /** The MSH segment, which is also segments[0]. */
    readonly header: Hl7Segment,
    readonly segments: readonly Hl7Segment[],
    readonly delimiters: Delimiters,
  ) {}

  first(name: string): Hl7Segment | undefined {
    return this.segments.find((s) => s.name === name);
  }

  all(name: string): Hl7Segment[] {
    return this.segments.filter((s) => s.name === name);
  }
}

const decoders = new Map<string, Message>();
const DECODERS_KEPT = 16;

/**
 * A message of the header's first two fields only, so the library's MSH count sees one; it gives
 * each segment its delimiters and escape decoding, as Message does for its own segments. Building
 * one costs more than reading a whole message, so one is kept per set of delimiters.
 */
function delimitingMessage(delimiters: Delimiters): Message {
  const header = `MSH${delimiters.field}${delimiters.encodingCharacters}${delimiters.field}`;
  let decoder = decoders.get(header);
  if (!decoder) {
    decoder = new Message({ text: header });
    if (decoders.size >= DECODERS_KEPT) decoders.clear();
    decoders.set(header, decoder);
  }
  return decoder;
}

const SEGMENT_ID = /^[A-Z][A-Z0-9]{2}$/;

/** Parses one message; anything that cannot be read as one is an AR naming where it went wrong. */
export function parseHl7Message(text: string): Hl7Message {
  const read = readSegments(segmentLines(text));
  if (read instanceof Hl7Message) return read;
  throw new Hl7InputError([read]);
}

/**
 * parseHl7Message for a message already cut into its segments (segmentLines), with the delimiters
 * when its header has been read already (readDelimiters of the first line). What makes it
 * unreadable comes back, not thrown: a message handler rejects it without the cost of a stack trace.
 */
export function readSegments(lines: readonly string[], known?: Delimiters): Hl7Message | Hl7Problem {
  const first = lines[0];
  if (first === undefined) return rejection({ segment: 'MSH' }, 100, 'message is empty');
  if (!first.startsWith('MSH')) {
    return rejection({ segment: 'MSH' }, 100, 'message does not start with an MSH segment');
  }
  const delimiters = known ?? readDelimiters(first);
  if (!delimiters) {
    return rejection({ segment: 'MSH', field: 2 }, 102, 'field separator or encoding characters are not usable');
  }
  let decoder: Message;
  try {
    decoder = delimitingMessage(delimiters);
  } catch {
    return rejection({ segment: 'MSH' }, 100, 'message cannot be parsed');
  }
  const counts = new Map<string, number>();
  const segments: Hl7Segment[] = [];
  // MSH-18, the field after MSH-17 (MSH-1 is the separator itself): hex escapes are UTF-8 bytes in a
  // message the MLLP listener reads as UTF-8 (UNICODE UTF-8, UNICODE, UTF-8 as platforms name it), and
  // in one naming no set, which it reads as UTF-8 too unless the sender is configured otherwise: read
  // byte by byte, \XC3A9\ was RENÃ©E in the check and the chart. Bytes that are no UTF-8 (\XE9\ of a
  // Latin-1 sender) are still one character each, and no Latin-1 name holds Ã© to be lost.
  const charset = charsetNamed(piece(piece(first, delimiters.field, 17) ?? '', delimiters.repetition, 0)?.trim() ?? '');
  const utf8Hex = charset === '' || (charset !== undefined && ENCODINGS[charset] === 'utf8');
  for (let index = 0; index < lines.length; index++) {
    const line = lines[index] as string;
    const name = line.slice(0, 3);
    const wellFormed = SEGMENT_ID.test(name) && (line.length === 3 || line.charAt(3) === delimiters.field);
    if (!wellFormed) {
      // Usually an unescaped line break inside a free-text field.
      const previous = segments[segments.length - 1];
      const where = { segment: previous?.name ?? 'MSH', sequence: previous?.sequence ?? 1 };
      return rejection(where, 100, 'the line after this segment is not a segment (an unescaped line break?)');
    }
    if (name === 'MSH' && index > 0) {
      return rejection({ segment: 'MSH', sequence: 2 }, 100, 'a second message in the same text: one message expected');
    }
    const sequence = (counts.get(name) ?? 0) + 1;
    counts.set(name, sequence);
    segments.push(new Hl7Segment(name, sequence, line, decoder, delimiters, utf8Hex));
  }
  const [header] = segments;
  if (header?.name !== 'MSH') return rejection({ segment: 'MSH' }, 100, 'message cannot be parsed');
  return new Hl7Message(header, segments, delimiters);
}
