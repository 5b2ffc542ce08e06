import { hasResult } from '../verification/outcome';
import type { WebhookDelivery } from '../verification/webhook';
import { resultKindOf, type CheckRow, type JobStore } from './job-store';
import { localCorrelationId } from './schedule';
import { applyStep, cancelledTakes, resultEvent, type SyncEvent, type SyncEventName, type Worker } from './worker';

/** Dead: kept for a person (another request's result), not merely not applied. */
export type WebhookApplied = { status: 'applied'; event?: { name: SyncEventName; event: SyncEvent } } | { status: 'duplicate' | 'ignored' | 'dead'; detail: string };

/**
 * One webhook delivery into the store: the delivery as received (keyed by its webhook-id, so a
 * replay is answered 2xx and not applied twice) and its effect on the check commit together,
 * before the receiver answers 2xx.
 */
export async function ingestWebhook(store: JobStore, worker: Pick<Worker, 'transitionFor' | 'portalHeard'>, delivery: WebhookDelivery, now: Date): Promise<WebhookApplied> {
  const { applied, heard } = await store.transaction(async (tx): Promise<{ applied: WebhookApplied; heard?: CheckRow }> => {
    const { message, duplicate } = await tx.addMessage({
      kind: 'webhook',
      dedupeKey: delivery.webhookId,
      receivedAt: delivery.receivedAt.toISOString(),
      raw: delivery.rawBody,
      status: 'received',
    });
    if (duplicate) return { applied: { status: 'duplicate', detail: `webhook ${delivery.webhookId} was received before (message ${message.id})` } };
    const { correlationId, externalId } = delivery.outcome.verification;
    // A result may come before the answer to its send is stored (the service done sooner than its
    // answer reached us): the check is then known by the externalId it was sent under. That answer
    // may commit while this waits for the check (another instance's worker, on PostgreSQL): the
    // check then has the correlation id, looked for again. A round given up before its result came
    // holds the failure stored for it in the chart's place, found by that failure's id.
    const row =
      (await tx.checkByCorrelationId(correlationId)) ??
      (externalId
        ? ((await tx.sentUnder(externalId)) ?? (await tx.checkByCorrelationId(correlationId)) ?? (await tx.checkByCorrelationId(localCorrelationId(externalId))))
        : undefined);
    // Found by its correlation id, a check sent under another externalId than the delivery names is another
    // request's (a service fault mixing two): its result, another patient's, is kept for a person, not applied.
    if (row && externalId && row.externalId !== externalId) {
      const detail = `names externalId ${externalId.slice(0, 80)}, not the one the check with its correlation id was sent under; kept, not applied`;
      await tx.updateMessage(message.id, { status: 'dead', detail });
      return { applied: { status: 'dead', detail } };
    }
    const cancelled = row && cancelledTakes(row, correlationId, now.toISOString(), delivery.outcome);
    if (!row || !(row.state === 'awaiting-result' || row.state === 'submitted' || cancelled || takesALateResult(row, delivery))) {
      const detail = row ? `the check is ${row.state}; result kept, not applied` : 'no check has this correlation id';
      await tx.updateMessage(message.id, { status: 'handled', detail });
      return { applied: { status: 'ignored', detail } };
    }
    // Its portal's answer is told to the outage watch once this has committed (on PostgreSQL a transaction may run again,
    // and would count it twice); its step holds the check for the outage one saying the portal away will find, all the same.
    // A cancelled check's result is told as any check's (the service did the verification), though nothing of it is written.
    const { change, event } = cancelled
      ? { change: cancelled, event: cancelled.result === undefined ? undefined : resultEvent(row, delivery.outcome, 'cancelled') }
      : worker.transitionFor(row, delivery.outcome, true);
    await tx.putCheck(applyStep(row, change, now));
    await tx.updateMessage(message.id, { status: 'handled', detail: `${row.state} -> ${change.state}` });
    return { applied: { status: 'applied', ...(event && { event }) }, heard: row };
  });
  if (heard) worker.portalHeard('go', heard, delivery.outcome);
  return applied;
}

/**
 * A check left to a person because its verification stayed pending too long, or was given up (the
 * service failing until maxAttempts), still takes that verification's result when it comes: the
 * round is the same, and no result of it is stored yet. A given-up one's is written after the
 * failure the chart holds for it, or in its place while that failure waits for the chart (a write
 * of it under way records it written, and the result is written next). One that is still pending
 * changes nothing: the person was told to look at the service.
 *
 * A check whose result was Partial takes the same verification's Completed, should the service
 * send one (a portal that answered after all): the chart's response for that verification is
 * updated in place, where the front desk would otherwise keep the gaps, and so does one whose Partial
 * still waits for the chart (down, or the write under way). Never the other way: a Partial delivered
 * after a Completed leaves it as it is. A body the prune cut is no Partial.
 */
function takesALateResult(row: CheckRow, delivery: WebhookDelivery): boolean {
  const { kind, verification } = delivery.outcome;
  if (!hasResult(kind)) return false;
  // Written, or still on its way to the chart (a write of it under way has this written after it).
  const partialOnItsWay = row.state === 'written' || row.state === 'result-stored';
  if (partialOnItsWay && kind === 'completed' && row.correlationId === verification.correlationId && resultKindOf(row) === 'partial') return true;
  if (row.state === 'written') return false;
  if (row.state === 'result-stored') return row.correlationId === localCorrelationId(row.externalId);
  return row.state === 'needs-attention' && (row.result as { correlationId?: unknown } | undefined)?.correlationId !== verification.correlationId;
}
