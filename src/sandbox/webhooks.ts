/**
 * Webhook delivery as docs/service.md assumes it: a POST of the verification
 * body, signed per the Standard Webhooks specification (webhook-id, webhook-timestamp,
 * webhook-signature), or carrying a static bearer token, or both. Any 2xx ends delivery;
 * otherwise 3 attempts in all, with exponential backoff. Every attempt is recorded.
 */
import { randomBytes, randomUUID } from 'node:crypto';
import { Webhook } from 'standardwebhooks';
import { request } from 'undici';
import { isWebhookSecret, notAWebhookSecret } from '../verification/webhook';
import type { Scheduler } from './scheduler';

export interface WebhookConfig {
  /** Where deliveries go; the sandbox only ever posts here. */
  url: string;
  /** Standard Webhooks secret, `whsec_<base64>`; see generateWebhookSecret(). */
  secret?: string | undefined;
  /** A static token sent as `Authorization: Bearer <token>`, for receivers configured that way. */
  bearerToken?: string | undefined;
}

export interface DeliveryAttempt {
  at: string;
  /** The receiver's HTTP status, or undefined when no answer came. */
  status?: number;
  /** Why the attempt failed, when it did without an HTTP status (timeout, refused). */
  error?: string;
}

export interface WebhookDelivery {
  webhookId: string;
  correlationId: string;
  url: string;
  /** skipped: no webhook was configured for the customer when the verification completed. */
  state: 'pending' | 'delivered' | 'failed' | 'skipped';
  attempts: DeliveryAttempt[];
}

export interface DeliveryTiming {
  attempts: number;
  /** Delay before the second attempt; each later one doubles it. */
  backoffMs: number;
  timeoutMs: number;
}

/**
 * Checks a webhook configuration when it is given, so a secret that is not `whsec_<base64>` fails
 * there, naming the field, instead of silently stopping every delivery later.
 */
export function checkWebhookConfig(config: WebhookConfig | undefined): void {
  if (config?.secret && !isWebhookSecret(config.secret)) throw new Error(notAWebhookSecret());
}

/** A fresh Standard Webhooks secret. */
export function generateWebhookSecret(): string {
  return `whsec_${randomBytes(24).toString('base64')}`;
}

/** Signs a body exactly as deliveries are signed; tests and receivers' own tests use it. */
export function signedHeaders(secret: string, webhookId: string, timestamp: Date, body: string): Record<string, string> {
  return {
    'webhook-id': webhookId,
    'webhook-timestamp': String(Math.floor(timestamp.getTime() / 1000)),
    'webhook-signature': new Webhook(secret).sign(webhookId, timestamp, body),
  };
}

export class WebhookSender {
  constructor(
    private readonly timing: DeliveryTiming,
    private readonly scheduler: Scheduler,
    private readonly now: () => Date,
  ) {}

  /** Starts delivering; the returned record is updated as attempts are made. */
  deliver(config: WebhookConfig, correlationId: string, payload: unknown): WebhookDelivery {
    const delivery: WebhookDelivery = {
      webhookId: `msg_${randomUUID()}`,
      correlationId,
      url: config.url,
      state: 'pending',
      attempts: [],
    };
    const body = JSON.stringify(payload);
    const attempt = async (n: number): Promise<void> => {
      const ok = await this.attempt(config, delivery, body);
      if (ok) delivery.state = 'delivered';
      else if (n >= this.timing.attempts || this.scheduler.signal.aborted) delivery.state = 'failed';
      else this.scheduler.later(this.timing.backoffMs * 2 ** (n - 1), () => attempt(n + 1));
    };
    this.scheduler.track(attempt(1));
    return delivery;
  }

  private async attempt(config: WebhookConfig, delivery: WebhookDelivery, body: string): Promise<boolean> {
    const at = this.now();
    const record: DeliveryAttempt = { at: at.toISOString() };
    delivery.attempts.push(record);
    try {
      const headers: Record<string, string> = {
        'content-type': 'application/json',
        'user-agent': 'dental-verification-sandbox',
        'x-sandbox': 'true',
        ...(config.secret ? signedHeaders(config.secret, delivery.webhookId, at, body) : { 'webhook-id': delivery.webhookId }),
        ...(config.bearerToken ? { authorization: `Bearer ${config.bearerToken}` } : {}),
      };
      const res = await request(config.url, {
        method: 'POST',
        headers,
        body,
        signal: AbortSignal.any([this.scheduler.signal, AbortSignal.timeout(this.timing.timeoutMs)]),
      });
      await res.body.dump();
      record.status = res.statusCode;
      return res.statusCode >= 200 && res.statusCode < 300;
    } catch (err) {
      record.error = err instanceof Error ? `${err.name}: ${err.message.split('\n')[0]}` : String(err);
      return false;
    }
  }
}
