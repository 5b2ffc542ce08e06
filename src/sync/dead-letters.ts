import { createHash } from 'node:crypto';
import type { JobStore, MessageKind } from './job-store';

/**
 * Keeps what arrived but could not be used (an unreadable HL7 frame, webhook or notification),
 * raw, with what was wrong: never lost, visible in `jobs messages --dead`, replayable. Each is
 * its own row, even when the same bytes come again.
 */
export async function deadLetter(store: JobStore, letter: { kind: MessageKind; raw: string; reason: string; receivedAt: Date }): Promise<void> {
  const at = letter.receivedAt.toISOString();
  const digest = createHash('sha256').update(letter.raw).update(String(process.hrtime.bigint())).digest('hex').slice(0, 16);
  await store.transaction(async (tx) => {
    const { message } = await tx.addMessage({ kind: letter.kind, dedupeKey: `dead:${at}:${digest}`, receivedAt: at, raw: letter.raw, status: 'dead' });
    await tx.updateMessage(message.id, { status: 'dead', detail: letter.reason });
  });
}
