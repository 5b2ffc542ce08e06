import { Message, Segment, type HL7Node } from 'node-hl7-client';
import { readDelimiters, type Delimiters } from './delimiters';
import { Hl7InputError, rejection } from './hl7-errors';
import { segmentLines } from './split-messages';

/**
 * A parsed message, read through node-hl7-client with its quirks kept out of sight:
 * - `message.get('IN1.4')` reads only the first IN1, so every segment is its own node, in
 *   message order (an IN2 belongs to the IN1 before it);
 * - every node it builds on a read (field, repetition, component) is an EventEmitter, and reading
 *   a field through get() cost more than the rest of the adapter together: a segment's fields are
 *   cut from the text its node holds, by the delimiters and with the escape decoding of the
 *   library's Message, once per field;
 * - cut at the field separator, an MSH is shifted by one (MSH-1 is the separator itself);
 * - the parser takes any three characters as a segment name and refuses blank lines, so lines are
 *   normalised and names checked here first;
 * - it counts `MSH|` anywhere in the text as a message start, so a facility or any other field
 *   ending in MSH makes "Multiple MSH segments found": each segment is handed to it on its own.
 */
export class Hl7Segment {
  private fieldTexts: string[] | undefined;
  /** Each field read so far, cut into its repetitions once: readers walk every repetition. */
  private readonly repetitionTexts: Array<string[] | undefined> = [];
  private rawFields: string[] | undefined;

  constructor(
    readonly name: string,
    /** Which occurrence of this segment name, from 1. */
    readonly sequence: number,
    /** The segment as received (still escaped), for copying fields into an acknowledgement. */
    readonly raw: string,
    private readonly node: HL7Node,
    private readonly decoder: Message,
    private readonly delimiters: Delimiters,
  ) {}

  /** A field, component and subcomponent (1-based) of a repetition (0-based); '' when absent. */
  value(field: number, component = 1, subcomponent = 1, repetition = 0): string {
    if (this.name === 'MSH' && field <= 2) {
      return component === 1 && subcomponent === 1 && repetition === 0 ? this.mshDelimiterField(field) : '';
    }
    const d = this.decoder.delimiters;
    const rep = this.repetitionsOf(field)[repetition];
    const comp = rep && piece(rep, d.charAt(COMPONENT), component - 1);
    const escaped = comp && piece(comp, d.charAt(SUBCOMPONENT), subcomponent - 1);
    if (!escaped) return '';
    const text = this.decoder.unescape(escaped);
    // "" is HL7's explicit null: the sender says there is no value.
    return text === '""' ? '' : text;
  }

  /** How many repetitions a field has (0 when empty). */
  repetitions(field: number): number {
    if (this.name === 'MSH' && field <= 2) return 1;
    return this.repetitionsOf(field).length;
  }

  /** A field exactly as received, escape sequences and all; '' when absent. */
  rawField(field: number): string {
    if (this.name === 'MSH' && field === 1) return this.delimiters.field;
    this.rawFields ??= this.raw.split(this.delimiters.field);
    return this.rawFields[this.name === 'MSH' ? field - 1 : field] ?? '';
  }

  /** A field's repetitions, cut once per field; components are cut out of a repetition on each read. */
  private repetitionsOf(field: number): string[] {
    const known = this.repetitionTexts[field];
    if (known) return known;
    const d = this.decoder.delimiters;
    this.fieldTexts ??= this.node.toRaw().split(d.charAt(FIELD));
    const text = this.fieldTexts[this.name === 'MSH' ? field - 1 : field] ?? '';
    // As the library splits: an empty field has no repetitions at all.
    const repetitions = text === '' ? [] : text.split(d.charAt(REPETITION));
    this.repetitionTexts[field] = repetitions;
    return repetitions;
  }

  private mshDelimiterField(field: number): string {
    return field === 1 ? this.delimiters.field : this.delimiters.encodingCharacters;
  }
}

/** Positions in node-hl7-client's delimiter string (segment, field, component, repetition, escape, subcomponent). */
const FIELD = 1;
const COMPONENT = 2;
const REPETITION = 3;
const SUBCOMPONENT = 5;

/** The index-th (0-based) piece of a text cut at a delimiter, as text.split(delimiter)[index] without the array. */
function piece(text: string, delimiter: string, index: number): string | undefined {
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
  return parseSegments(segmentLines(text));
}

/** parseHl7Message for a message already cut into its segments (segmentLines). */
export function parseSegments(lines: readonly string[]): Hl7Message {
  const first = lines[0];
  if (first === undefined) throw new Hl7InputError([rejection({ segment: 'MSH' }, 100, 'message is empty')]);
  if (!first.startsWith('MSH')) {
    throw new Hl7InputError([rejection({ segment: 'MSH' }, 100, 'message does not start with an MSH segment')]);
  }
  const delimiters = readDelimiters(first);
  if (!delimiters) {
    throw new Hl7InputError([rejection({ segment: 'MSH', field: 2 }, 102, 'field separator or encoding characters are not usable')]);
  }
  const counts = new Map<string, number>();
  const located: Array<{ name: string; sequence: number }> = [];
  for (const [index, line] of lines.entries()) {
    const name = line.slice(0, 3);
    const previous = located[located.length - 1];
    const wellFormed = SEGMENT_ID.test(name) && (line.length === 3 || line.charAt(3) === delimiters.field);
    if (!wellFormed) {
      // Usually an unescaped line break inside a free-text field.
      const where = { segment: previous?.name ?? 'MSH', sequence: previous?.sequence ?? 1 };
      throw new Hl7InputError([rejection(where, 100, 'the line after this segment is not a segment (an unescaped line break?)')]);
    }
    if (name === 'MSH' && index > 0) {
      throw new Hl7InputError([rejection({ segment: 'MSH', sequence: 2 }, 100, 'a second message in the same text: one message expected')]);
    }
    const sequence = (counts.get(name) ?? 0) + 1;
    counts.set(name, sequence);
    located.push({ name, sequence });
  }
  let nodes: HL7Node[];
  let decoder: Message;
  try {
    decoder = delimitingMessage(delimiters);
    nodes = lines.map((line) => new Segment(decoder, line.trim()));
  } catch {
    throw new Hl7InputError([rejection({ segment: 'MSH' }, 100, 'message cannot be parsed')]);
  }
  const segments = located.map(({ name, sequence }, i) => {
    const node = nodes[i];
    const raw = lines[i];
    if (node === undefined || raw === undefined || node.name !== name) {
      throw new Hl7InputError([rejection({ segment: name, sequence }, 100, 'segment cannot be parsed')]);
    }
    return new Hl7Segment(name, sequence, raw, node, decoder, delimiters);
  });
  const [header] = segments;
  if (header?.name !== 'MSH') throw new Hl7InputError([rejection({ segment: 'MSH' }, 100, 'message cannot be parsed')]);
  return new Hl7Message(header, segments, delimiters);
}
