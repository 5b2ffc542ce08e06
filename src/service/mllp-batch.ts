import { randomBytes } from 'node:crypto';
import { DEFAULT_DELIMITERS, readDelimiters } from '../adapters/hl7/delimiters';
import { segmentLines, splitMessages } from '../adapters/hl7/split-messages';

/**
 * A batch in one frame: [FHS] { [BHS] { MSH ... } [BTS] } [FTS]. Each message is handled on its
 * own and the frame is answered with one acknowledgement batch, in one frame.
 *
 * The standard (v2.5 section 2.10.3, "Acknowledging batches") leaves the choice to the
 * application: (a) acknowledge every message in a response batch, (b) no protocol
 * acknowledgement, only a report people read, or (c) a response batch holding acknowledgements
 * for the messages in error only, empty when all were accepted. This listener does (a): each
 * message gets exactly the ACKs it would get on its own (one in original mode, as MSH-15/16 ask in
 * enhanced mode), so a sender can match every control id, and "accepted" never has to be read
 * from an absence. The reply mirrors the envelope received: an FHS/FTS pair when the frame had
 * one, and per batch a BHS that swaps sender and receiver, has its own BHS-11 and names the batch
 * answered in BHS-12 (reference batch control id), then a BTS whose BTS-1 counts the ACKs in it.
 * One frame in, one frame out keeps the sender's wait-for-the-answer rhythm of MLLP.
 */
export interface Batch {
  /** The FHS segment as received, when the frame had one. */
  file?: string | undefined;
  groups: BatchGroup[];
}

export interface BatchGroup {
  /** The BHS segment as received; messages outside any BHS form a group without one. */
  header?: string | undefined;
  messages: string[];
}

/** The batch a frame holds, or undefined when it is a single message (it does not begin with FHS or BHS). */
export function readBatch(text: string): Batch | undefined {
  const lines = segmentLines(text);
  const first = lines[0]?.slice(0, 3);
  if (first !== 'FHS' && first !== 'BHS') return undefined;
  let file: string | undefined;
  const groups: Array<{ header?: string; lines: string[] }> = [];
  for (const line of lines) {
    const id = line.slice(0, 3);
    if (id === 'FHS') file ??= line;
    else if (id === 'BHS') groups.push({ header: line, lines: [] });
    else if (id !== 'BTS' && id !== 'FTS') {
      let current = groups.at(-1);
      if (!current) groups.push((current = { lines: [] }));
      current.lines.push(line);
    }
  }
  return { file, groups: groups.map((g) => ({ header: g.header, messages: splitMessages(g.lines.join('\r')) })) };
}

/** The acknowledgement batch: `acks[i]` holds the ACK texts for the messages of group i, in order. */
export function batchAcknowledgement(batch: Batch, acks: ReadonlyArray<ReadonlyArray<string>>, now = new Date()): string {
  const segments: string[] = [];
  if (batch.file) segments.push(replyHeader(batch.file, now));
  batch.groups.forEach((group, i) => {
    const texts = acks[i] ?? [];
    if (group.header) segments.push(replyHeader(group.header, now));
    segments.push(...texts);
    if (group.header) segments.push(trailer('BTS', texts.length, group.header));
  });
  if (batch.file) segments.push(trailer('FTS', batch.groups.filter((g) => g.header).length, batch.file));
  return segments.join('\r');
}

/** FHS and BHS share their layout: 3/4 sender, 5/6 receiver, 7 time, 11 control id, 12 reference control id. */
function replyHeader(received: string, now: Date): string {
  const d = headerDelimiters(received);
  const fields = received.split(d.field);
  // fields[0] is the segment id and fields[1] its -2, so field n is fields[n - 1].
  const field = (n: number) => fields[n - 1] ?? '';
  const id = `${received.slice(0, 1)}ACK${randomBytes(8).toString('hex').toUpperCase()}`;
  const time = `${now.toISOString().replace(/\D/g, '').slice(0, 14)}+0000`;
  return [received.slice(0, 3), field(2), field(5), field(6), field(3), field(4), time, '', '', '', id, field(11)].join(d.field);
}

function trailer(id: 'BTS' | 'FTS', count: number, header: string): string {
  return `${id}${headerDelimiters(header).field}${count}`;
}

/** FHS-1/2 and BHS-1/2 declare delimiters exactly as MSH-1/2 do. */
function headerDelimiters(segment: string) {
  return readDelimiters(`MSH${segment.slice(3)}`) ?? DEFAULT_DELIMITERS;
}
