import { acknowledgements, type Ack, type AckCode, type CommitAckCode } from '../adapters/hl7/ack';
import { rejection, type Hl7Problem } from '../adapters/hl7/hl7-errors';
import { readMessageHeader } from '../adapters/hl7/message-header';
import { storeOutage } from '../sync/store-outage';
import { decodeFrame, encodeText, type Charsets } from './hl7-charset';
import { batchAcknowledgement, readBatch } from './mllp-batch';
import { frame, type DecodedFrame } from './mllp-framing';
import type { MllpLog, MllpStats } from './mllp-stats';

/**
 * What one decoded frame is answered with: the ACK frames to write, in order, or undefined when
 * the frame could be neither handled nor kept as a dead letter. Then no ACK is sent and the
 * connection is dropped, so the sender sends again and nothing is lost.
 */
export interface DeadLetter {
  /** The frame's text (for a frame that could not be decoded, its bytes read one to a character). */
  message: string;
  reason: string;
  error?: unknown;
  /** The frame's bytes as received, when its text may not say them exactly. */
  bytes?: Buffer;
}

export interface AnswerContext {
  handler: (message: string) => Promise<readonly Ack[]>;
  onDeadLetter?: ((letter: DeadLetter) => void | Promise<void>) | undefined;
  charsets: Charsets;
  maxFrameBytes: number;
  stats: MllpStats;
  log?: MllpLog | undefined;
  /** Where the frame came from, for logs: an address, never content. */
  remote: string;
  /** Whether a message the store cannot take is to be said at info now (onceASpell, the listener's), else at debug. */
  storeRefusalSaid?: () => boolean;
}

export async function answerFrame(decoded: DecodedFrame, context: AnswerContext): Promise<Buffer[] | undefined> {
  switch (decoded.kind) {
    case 'message':
      return answerMessageFrame(decoded.payload, context);
    case 'oversized':
      return answerOversized(decoded.head, decoded.bytes, context);
    case 'aborted':
      return keepAborted(decoded, context);
  }
}

async function answerMessageFrame(payload: Buffer, context: AnswerContext): Promise<Buffer[] | undefined> {
  const decoded = decodeFrame(payload, context.charsets);
  if (!decoded.ok) {
    context.stats.framesUndecodable++;
    context.log?.warn({ remote: context.remote, bytes: payload.length }, 'MLLP frame not decodable in its character set');
    return refuse(context, { message: decoded.text, bytes: payload, reason: `MSH-18: ${decoded.problem.reason}` }, () => frames(failure(decoded.text, 'CR', decoded.problem), decoded.encoding, context));
  }
  const batch = readBatch(decoded.text);
  if (!batch) {
    const acks = await answerMessage(decoded.text, context);
    return acks && frames(acks, decoded.encoding, context);
  }
  const answered: string[][] = [];
  for (const group of batch.groups) {
    const texts: string[] = [];
    for (const message of group.messages) {
      const acks = await answerMessage(message, context);
      if (!acks) return undefined;
      count(acks, context);
      texts.push(...acks.map((a) => a.text));
    }
    answered.push(texts);
  }
  return [frame(encodeText(batchAcknowledgement(batch, answered), decoded.encoding))];
}

async function answerMessage(message: string, context: AnswerContext): Promise<readonly Ack[] | undefined> {
  context.stats.messagesHandled++;
  try {
    return await context.handler(message);
  } catch (error) {
    // Nothing wrong with the message: the store went away under it (or is full, or held past its busy_timeout).
    // Unanswered, as when it is down, it is sent again; kept as a dead letter it would be answered AR, and not sent again.
    // The outage itself is said once by the store's watch (watchOutages), not for each message it turns away.
    // A sender resending at once would write a line per try, thousands in a 30 s outage: one a spell, the rest at debug.
    if (storeOutage(error)) {
      const fields = { remote: context.remote, bytes: message.length };
      const line = `MLLP message not stored: the job store cannot take it now; connection dropped without an ACK${context.storeRefusalSaid ? ' (said once in ten minutes)' : ''}`;
      if (context.storeRefusalSaid?.() ?? true) context.log?.info(fields, line);
      else context.log?.debug?.(fields, line);
      return undefined;
    }
    const kept = await deadLetter(context, { message, reason: 'the handler failed', error });
    // Said once it is so: a store that is down keeps nothing either, and deadLetter says that instead.
    if (kept) context.log?.warn({ remote: context.remote, bytes: message.length }, 'MLLP handler failed; message kept as a dead letter');
    // Not stored: CE asks the sender to send it again.
    return kept ? failure(message, 'CE', rejection({ segment: 'MSH' }, 207, 'application internal error')) : undefined;
  }
}

async function answerOversized(head: Buffer, bytes: number, context: AnswerContext): Promise<Buffer[] | undefined> {
  const limit = context.maxFrameBytes;
  context.stats.framesOversized++;
  context.log?.warn({ remote: context.remote, bytes, limit }, 'MLLP frame over the size limit');
  // The head is cut at a byte count, maybe inside a character: read it leniently, keep its bytes.
  const { text, encoding } = decodeFrame(head, context.charsets);
  // Sending it again would not make it smaller: CR.
  return refuse(context, { message: text, bytes: head, reason: `frame of ${bytes} bytes is larger than ${limit} bytes (first ${head.length} bytes kept)` }, () =>
    frames(failure(text, 'CR', rejection({ segment: 'MSH' }, 207, `message larger than ${limit} bytes`)), encoding, context),
  );
}

/**
 * A frame no resend makes acceptable (too large, not decodable), refused once its letter is kept.
 * A listener given nowhere to keep letters refuses it all the same: unanswered, it would be sent
 * again and again, as large or as undecodable, and the sender's queue stopped behind it for good.
 */
async function refuse(context: AnswerContext, letter: DeadLetter, answer: () => Buffer[]): Promise<Buffer[] | undefined> {
  const nowhere = !context.onDeadLetter;
  const kept = await deadLetter(context, letter, nowhere ? 'the frame is refused all the same, as sent again it would be again' : undefined);
  return kept || nowhere ? answer() : undefined;
}

/** No ACK: the sender gave this frame up, and an answer would be read as the answer to its next one. */
async function keepAborted(decoded: Extract<DecodedFrame, { kind: 'aborted' }>, context: AnswerContext): Promise<Buffer[]> {
  context.stats.framesAborted++;
  context.log?.warn({ remote: context.remote, bytes: decoded.bytes, cause: decoded.cause }, 'MLLP frame abandoned before its end');
  const reason =
    decoded.cause === 'restarted'
      ? `frame abandoned after ${decoded.bytes} bytes: a new frame began before it ended`
      : `frame unfinished after ${decoded.bytes} bytes when the connection ended or went idle`;
  // Not kept, it is lost all the same: no ACK was owed, and dropping the connection would bring it back no more than the next frame.
  await deadLetter(context, { message: decodeFrame(decoded.fragment, context.charsets).text, bytes: decoded.fragment, reason }, 'the abandoned frame is lost');
  return [];
}

/** Keeps the letter; when that fails, says so with what becomes of the frame (`then`): by default it goes unanswered, to be sent again. */
async function deadLetter(context: AnswerContext, letter: DeadLetter, then = 'connection dropped without an ACK'): Promise<boolean> {
  // A listener given nowhere to keep letters (an embedder's, without onDeadLetter) keeps nothing: answered CE or AR as kept, the frame was lost.
  if (!context.onDeadLetter) {
    context.log?.warn({ remote: context.remote }, `MLLP listener has no onDeadLetter, so nothing is kept; ${then}`);
    return false;
  }
  try {
    await context.onDeadLetter(letter);
    context.stats.deadLetters++;
    return true;
  } catch {
    context.log?.warn({ remote: context.remote }, `MLLP dead letter could not be kept; ${then}`);
    return false;
  }
}

function failure(message: string, commit: CommitAckCode, problem: Hl7Problem): Ack[] {
  return acknowledgements(readMessageHeader(message), { commit, application: 'AR', problems: [problem] });
}

function frames(acks: readonly Ack[], encoding: BufferEncoding, context: AnswerContext): Buffer[] {
  count(acks, context);
  return acks.map((ack) => frame(encodeText(ack.text, encoding)));
}

function count(acks: readonly Ack[], context: AnswerContext): void {
  for (const ack of acks) context.stats.acks[ack.code satisfies AckCode]++;
}
