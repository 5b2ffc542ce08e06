import { Webhook } from 'standardwebhooks';
import { sleep } from '../support/bookings';

export interface WebhookLoad {
  url: string;
  secret: string;
  seconds: number;
  perSecond: number;
  /** A delivery not answered within this long counts as unanswered: the sender always ends. */
  answerWithinMs: number;
}

export interface WebhookLoadResult {
  sent: number;
  /** Answers by HTTP status; a delivery that got none is counted under 0. */
  statuses: Record<number, number>;
  /** Why deliveries got no answer, by error code (a delivery unanswered after `answerWithinMs` is a TimeoutError). */
  failures: Record<string, number>;
  seconds: number;
}

/**
 * Signed deliveries, paced to `perSecond` and spread over each second, for `seconds`. Each is for
 * no verification the service made (`delivery` in the body names it). Run in a thread of its own
 * (test/bench/measure.ts threadFor): the sender is another program, not a task on serve's loop.
 */
export async function sendWebhooks(load: WebhookLoad): Promise<WebhookLoadResult> {
  const signer = new Webhook(load.secret);
  const statuses: Record<number, number> = {};
  const failures: Record<string, number> = {};
  const pending: Promise<void>[] = [];
  const started = Date.now();
  let sent = 0;
  for (let second = 0; second < load.seconds; second++) {
    for (let i = 0; i < load.perSecond; i++) {
      const id = `msg_load_${second}_${i}`;
      const at = new Date();
      const body = `{"correlationId": 42, "status": [], "delivery": "${id}"}`;
      const headers = { 'content-type': 'application/json', 'webhook-id': id, 'webhook-timestamp': String(Math.floor(at.getTime() / 1000)), 'webhook-signature': signer.sign(id, at, body) };
      pending.push(
        fetch(load.url, { method: 'POST', headers, body, signal: AbortSignal.timeout(load.answerWithinMs) })
          .then(async (res) => {
            await res.arrayBuffer();
            statuses[res.status] = (statuses[res.status] ?? 0) + 1;
          })
          .catch((err: unknown) => {
            statuses[0] = (statuses[0] ?? 0) + 1;
            const code = failureCode(err);
            failures[code] = (failures[code] ?? 0) + 1;
          }),
      );
      sent++;
      if (i % 20 === 19) await sleep(Math.max(0, started + second * 1000 + ((i + 1) / load.perSecond) * 1000 - Date.now()));
    }
  }
  await Promise.all(pending);
  return { sent, statuses, failures, seconds: (Date.now() - started) / 1000 };
}

/** The most telling name for why a fetch got no answer: its cause's code (ECONNRESET, UND_ERR_…) or the error's name. */
function failureCode(err: unknown): string {
  const cause = err instanceof Error ? (err.cause as { code?: unknown } | undefined) : undefined;
  if (typeof cause?.code === 'string') return cause.code;
  return err instanceof Error ? err.name : 'unknown';
}
