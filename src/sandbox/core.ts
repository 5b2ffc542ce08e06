import type { Scheduler } from './scheduler';
import type { SandboxState } from './state';
import type { WebhookSender } from './webhooks';

/** How long the simulated service takes; every figure in milliseconds unless named otherwise. */
export interface SandboxTiming {
  /** From an asynchronous request to its result (and webhook). */
  asyncCompletionMs: number;
  /** From a credentials validation request to a final status; the service asks for a first poll no sooner than 3 s. */
  validationMs: number;
  /** How long SBX-SLOW holds its answer. */
  slowMs: number;
  /** Retry-After on the 503 and 429 scenarios, in seconds. */
  retryAfterSeconds: number;
  /** Delay before the second webhook attempt; the third waits twice as long. */
  webhookBackoffMs: number;
  /** How long one webhook attempt may take. */
  webhookTimeoutMs: number;
  /** Added to every request before it is handled, as a remote service's round trip: latencyMs ± latencyJitterMs, uniformly. */
  latencyMs: number;
  latencyJitterMs: number;
}

export const DEFAULT_TIMING: SandboxTiming = {
  asyncCompletionMs: 1500,
  validationMs: 3000,
  slowMs: 15000,
  retryAfterSeconds: 1,
  webhookBackoffMs: 1000,
  webhookTimeoutMs: 5000,
  latencyMs: 0,
  latencyJitterMs: 0,
};

/** One request's added latency under `timing`. */
export function requestLatencyMs(timing: Pick<SandboxTiming, 'latencyMs' | 'latencyJitterMs'>, random = Math.random): number {
  return Math.max(0, timing.latencyMs + (2 * random() - 1) * timing.latencyJitterMs);
}

/** What the route modules share. */
export interface SandboxCore {
  state: SandboxState;
  scheduler: Scheduler;
  webhooks: WebhookSender;
  timing: SandboxTiming;
  now: () => Date;
}

/** Credentials the simulated portals refuse: a username or password containing invalid, wrong or expired. */
export function portalRefuses(credentials: { username: string; password: string }): boolean {
  return /invalid|wrong|expired/i.test(credentials.username) || /invalid|wrong|expired/i.test(credentials.password);
}
