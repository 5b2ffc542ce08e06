import { randomUUID } from 'node:crypto';
import { DEFAULT_DELIMITERS, escapeText, type Delimiters } from './delimiters';
import { describeProblem, ERROR_CODES, type Hl7Problem } from './hl7-errors';
import { ackConditions, type AckCondition, type MessageHeader } from './message-header';

/**
 * Acknowledgements, made in this one place. Original mode (MSH-15 and MSH-16 empty) answers one
 * AA/AE/AR. Enhanced mode answers an accept (commit) ACK, CA/CE/CR, as MSH-15 asks, then an
 * application ACK, AA/AE/AR, as MSH-16 asks: none, one or both. Each ACK swaps sender and
 * receiver, has its own unique MSH-10, echoes the inbound MSH-10 in MSA-2, keeps the sender's
 * version and delimiters, and carries one ERR per problem: ERR-2 location, ERR-3 table 0357 code,
 * ERR-4 severity (E, or W for a warning an AA carries), ERR-8 readable text, plus ERR-1 (the v2.3/2.4 form) for senders of those versions.
 */
export type ApplicationAckCode = 'AA' | 'AE' | 'AR';
export type CommitAckCode = 'CA' | 'CE' | 'CR';
export type AckCode = ApplicationAckCode | CommitAckCode;

export interface Ack {
  code: AckCode;
  /** The ACK's own MSH-10. */
  controlId: string;
  /** MSA-2: the control id of the message acknowledged ('' when it could not be read). */
  acknowledges: string;
  /** The ACK message, segments separated by CR, without MLLP framing. */
  text: string;
}

export interface AckOptions {
  now?: Date;
}

/** How a message fared, in both senses enhanced mode tells apart. */
export interface Answer {
  /**
   * CA: kept (a readable message whose data cannot be used is kept too, as a dead letter); CE:
   * keeping it failed, so the sender should send it again; CR: not acceptable at all (cannot be
   * parsed, or its type or version is not supported).
   */
  commit: CommitAckCode;
  /** What the message meant: AA used, AE readable but its data unusable, AR rejected. */
  application: ApplicationAckCode;
  problems?: readonly Hl7Problem[] | undefined;
}

/** The acknowledgements for one message, in the order they are to be sent. */
export function acknowledgements(header: MessageHeader | undefined, answer: Answer, options: AckOptions = {}): Ack[] {
  const problems = answer.problems ?? [];
  const conditions = header && ackConditions(header);
  if (!conditions) return [buildAck(header, { code: answer.application, problems }, options)];
  const acks: Ack[] = [];
  if (wanted(conditions.accept, answer.commit === 'CA')) {
    // The accept ACK says only whether the message was kept; what was wrong with its data is the application ACK's to say.
    acks.push(buildAck(header, { code: answer.commit, problems: answer.commit === 'CA' ? [] : problems }, options));
  }
  if (wanted(conditions.application, answer.application === 'AA')) acks.push(buildAck(header, { code: answer.application, problems }, options));
  return acks;
}

/** Table 0155: AL always, NE never, ER on an error or reject only, SU on success only. */
function wanted(condition: AckCondition, success: boolean): boolean {
  switch (condition) {
    case 'AL':
      return true;
    case 'NE':
      return false;
    case 'ER':
      return !success;
    case 'SU':
      return success;
  }
}

/** Versions before 2.5 read errors from ERR-1 (ELD); 2.3 has no message structure in MSH-9. */
const OLD_ERR = /^2\.(3|4)(\.|$)/;

/**
 * The most of a sender's header value an ACK echoes: an HD is at most 227 characters in v2.5, a
 * control id 199. A longer one is not a header a sender means, and its ACK must stay small.
 */
const ECHO_MAX = 227;
const VERSION_ID = /^\d+\.\d+(\.\d+)?$/;

/** A header value as the ACK echoes it: at most ECHO_MAX characters, never ending inside an escape sequence. */
function echoed(value: string | undefined, d: Delimiters): string {
  if (value === undefined || value.length <= ECHO_MAX) return value ?? '';
  const cut = value.slice(0, ECHO_MAX);
  if (d.escape === '') return cut;
  const escapes = cut.split(d.escape).length - 1;
  return escapes % 2 === 0 ? cut : cut.slice(0, cut.lastIndexOf(d.escape));
}

/** One ACK with exactly the code given. */
export function buildAck(
  header: MessageHeader | undefined,
  answer: { code: AckCode; problems?: readonly Hl7Problem[] },
  options: AckOptions = {},
): Ack {
  const d = header?.delimiters ?? DEFAULT_DELIMITERS;
  // A version that is not one (a sender's garbage, or a megabyte of it) is answered in the one this plugin speaks.
  const version = header?.version && VERSION_ID.test(header.version) ? header.version : '2.5.1';
  const event = echoed(header?.triggerEvent, d);
  const { code } = answer;
  const controlId = newControlId();
  const problems = answer.problems ?? [];
  const messageType = version === '2.3' ? ['ACK', event] : ['ACK', event, 'ACK'];
  const msh = [
    'MSH',
    d.encodingCharacters,
    echoed(header?.receivingApplication, d),
    echoed(header?.receivingFacility, d),
    echoed(header?.sendingApplication, d),
    echoed(header?.sendingFacility, d),
    hl7Timestamp(options.now ?? new Date()),
    '',
    messageType.join(d.component),
    controlId,
    echoed(header?.processingId, d) || 'P',
    version,
  ];
  const first = problems[0];
  const msa = ['MSA', code, echoed(header?.controlId, d), first ? escapeText(describeProblem(first), d) : ''];
  const segments = [msh, trimEmpty(msa), ...problems.map((p) => errSegment(p, d, OLD_ERR.test(version)))];
  return {
    code,
    controlId,
    acknowledges: echoed(header?.controlId, d),
    text: segments.map((fields) => fields.join(d.field)).join('\r'),
  };
}

function errSegment(p: Hl7Problem, d: Delimiters, oldForm: boolean): string[] {
  const c = d.component;
  const codeText = ERROR_CODES[p.code];
  const location = p.field === undefined ? [p.segment, String(p.sequence)] : [p.segment, String(p.sequence), String(p.field), String(p.repetition ?? 1), p.component === undefined ? '' : String(p.component)];
  const hasSubcomponents = d.encodingCharacters.length >= 4;
  const eldCode = hasSubcomponents ? [String(p.code), escapeText(codeText, d), 'HL70357'].join(d.subcomponent) : String(p.code);
  const eld = oldForm ? [p.segment, String(p.sequence), p.field === undefined ? '' : String(p.field), eldCode].join(c) : '';
  return [
    'ERR',
    eld,
    trimEmpty(location).join(c),
    [String(p.code), escapeText(codeText, d), 'HL70357'].join(c),
    p.ackCode === 'AA' ? 'W' : 'E',
    '',
    '',
    '',
    escapeText(describeProblem(p), d),
  ];
}

function trimEmpty(values: string[]): string[] {
  let end = values.length;
  while (end > 0 && values[end - 1] === '') end--;
  return values.slice(0, end);
}

/**
 * 20 characters: the MSH-10 length every version accepts. randomUUID draws from a cached pool;
 * randomBytes per ACK was a tenth of the time the adapter spends on a message.
 */
function newControlId(): string {
  return `ACK${randomUUID().replace(/-/g, '').slice(0, 17).toUpperCase()}`;
}

function hl7Timestamp(date: Date): string {
  const iso = date.toISOString();
  return `${iso.slice(0, 4)}${iso.slice(5, 7)}${iso.slice(8, 10)}${iso.slice(11, 13)}${iso.slice(14, 16)}${iso.slice(17, 19)}+0000`;
}
