import { hash } from 'node:crypto';
import { readDelimiters, type Delimiters } from './delimiters';
import { piece } from './hl7-message';
import { segmentLines } from './split-messages';

/**
 * The MSH fields an acknowledgement needs, read straight from the first segment. It works when the
 * rest of the message does not parse, so even a rejected message gets an ACK that echoes its
 * control id. Fields are kept as received (still escaped): the ACK writes them back with the same
 * delimiters.
 */
export interface MessageHeader {
  delimiters: Delimiters;
  sendingApplication: string;
  sendingFacility: string;
  receivingApplication: string;
  receivingFacility: string;
  /** MSH-9.1 and MSH-9.2, e.g. SIU and S12. */
  messageCode: string;
  triggerEvent: string;
  /** MSH-7.1 as received: when the sender says it made the message. */
  sentAt: string;
  /** MSH-10. */
  controlId: string;
  /** MSH-11 as received (processing id, e.g. P or T^A). */
  processingId: string;
  /** MSH-12.1, e.g. 2.5.1. */
  version: string;
  /** MSH-15 and MSH-16 (table 0155); either one valued means enhanced acknowledgement mode. */
  acceptAckType: string;
  applicationAckType: string;
}

/**
 * MSH-9's message type and event as the profile names them, in upper case (SIU^S12). HL7's codes
 * are upper case, but some engines write them lower (siu^s12); no two codes of tables 0076 and
 * 0003 differ but in case, so either names one event. The ACK echoes the event as received.
 */
export function messageTypeOf(header: MessageHeader): string {
  return `${header.messageCode}^${header.triggerEvent}`.toUpperCase();
}

export function readMessageHeader(text: string): MessageHeader | undefined {
  return headerOf(segmentLines(text));
}

/** The header of a message already cut into its segments (segmentLines). */
export function headerOf(lines: readonly string[]): MessageHeader | undefined {
  const first = lines[0];
  if (first === undefined) return undefined;
  const delimiters = readDelimiters(first);
  if (!delimiters) return undefined;
  const fields = first.split(delimiters.field);
  // fields[0] is "MSH" and fields[1] MSH-2, so MSH-n is fields[n - 1].
  const msh = (n: number) => (fields[n - 1] ?? '').trim();
  // The first components only: cut out, not split into arrays of every component.
  const type = msh(9);
  const messageCode = piece(type, delimiters.component, 0) ?? '';
  const triggerEvent = piece(type, delimiters.component, 1) ?? '';
  const version = piece(msh(12), delimiters.component, 0) ?? '';
  const sentAt = piece(msh(7), delimiters.component, 0) ?? '';
  return {
    delimiters,
    sendingApplication: msh(3),
    sendingFacility: msh(4),
    receivingApplication: msh(5),
    receivingFacility: msh(6),
    messageCode: messageCode.trim(),
    triggerEvent: triggerEvent.trim(),
    sentAt: sentAt.trim(),
    controlId: msh(10),
    processingId: msh(11),
    version: version.trim(),
    acceptAckType: msh(15),
    applicationAckType: msh(16),
  };
}

/** Marks a control id this adapter derived, not one a sender wrote. */
export const DERIVED_CONTROL_ID_PREFIX = 'sha256:';

/**
 * The id a message is known by (duplicate detection, the store, each check's
 * source.messageControlId): MSH-10, or, when the sender left it empty, `sha256:` and the hex
 * digest of its resendIdentity. The ACK still echoes MSH-10 as received: empty.
 */
export function messageControlId(header: MessageHeader | undefined, text: string): string {
  if (header?.controlId) return header.controlId;
  return `${DERIVED_CONTROL_ID_PREFIX}${hash('sha256', resendIdentity(text), 'hex')}`;
}

/**
 * A message as its resends are compared: its segments joined by CR, MSH-7 left empty. A copy
 * resent may differ in line endings, blank lines or framing bytes, and a sender's engine may stamp
 * it with the time it was sent again; it is the same message.
 */
export function resendIdentity(text: string): string {
  const [msh = '', ...rest] = segmentLines(text);
  if (!msh.startsWith('MSH') || msh.length < 4) return [msh, ...rest].join('\r');
  const separator = msh.charAt(3);
  const fields = msh.split(separator);
  if (fields.length > 6) fields[6] = '';
  return [fields.join(separator), ...rest].join('\r');
}

export function isEnhancedMode(header: MessageHeader): boolean {
  return header.acceptAckType !== '' || header.applicationAckType !== '';
}

/** Table 0155: when an acknowledgement is wanted. */
export type AckCondition = 'AL' | 'NE' | 'ER' | 'SU';

/**
 * When each acknowledgement is wanted in enhanced mode; undefined in original mode. An empty
 * MSH-15 next to a valued MSH-16 means AL. An empty MSH-16 next to a valued MSH-15 means NE: a
 * sender that names only accept acknowledgements waits for one answer per message, and a second
 * one would be read as the answer to its next message. A value not in the table means AL: better
 * an answer the sender ignores than silence it waits on.
 */
export function ackConditions(header: MessageHeader): { accept: AckCondition; application: AckCondition } | undefined {
  if (!isEnhancedMode(header)) return undefined;
  return { accept: condition(header.acceptAckType, 'AL'), application: condition(header.applicationAckType, 'NE') };
}

function condition(value: string, ifEmpty: AckCondition): AckCondition {
  if (value === '') return ifEmpty;
  const code = value.toUpperCase();
  return code === 'AL' || code === 'NE' || code === 'ER' || code === 'SU' ? code : 'AL';
}
