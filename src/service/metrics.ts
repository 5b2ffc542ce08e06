import { collectDefaultMetrics, Counter, Gauge, Histogram, Registry } from 'prom-client';
import { MessageKind, type JobStore } from '../sync/job-store';

/**
 * How long /metrics and /healthz wait for the job store. A database that stops answering without
 * closing its connections (a failover, a network dropping packets) holds a read for the pool's
 * connection timeout or the query's (10 s, 60 s): a scrape would fail whole past Prometheus's
 * timeout (10 s by default), the process looking dead where its store is out, and a health check
 * would say nothing past a balancer's. Far more than a store that answers takes.
 */
export const STORE_ANSWER_MS = 5000;

/** The store's answer, or a rejection once STORE_ANSWER_MS has passed without it (the read is let go). */
export function storeAnswer<T>(read: Promise<T>): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  const late = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new Error(`no answer in ${STORE_ANSWER_MS / 1000} s`)), STORE_ANSWER_MS);
  });
  return Promise.race([read, late]).finally(() => clearTimeout(timer));
}

/**
 * The process's own metrics (memory, CPU, heap, event-loop delay), once per process: prom-client
 * keeps an observer and a timer per collection that nothing stops, and the figures are the
 * process's whichever instance is scraped.
 */
let processRegistry: Registry | undefined;
function processMetrics(): Registry {
  if (!processRegistry) {
    processRegistry = new Registry();
    collectDefaultMetrics({ register: processRegistry });
  }
  return processRegistry;
}

/** The service's Prometheus metrics, on a registry of its own so several instances in one process do not mix. */
export class SyncMetrics {
  readonly registry = new Registry();
  readonly messages = new Counter({ name: 'dental_elig_messages_total', help: 'Messages received, by type and ACK code', labelNames: ['type', 'ack'], registers: [this.registry] });
  readonly outcomes = new Counter({ name: 'dental_elig_outcomes_total', help: 'Verification outcomes stored, by outcome (each as stored: a check given up as NotVerified and answered later counts under both)', labelNames: ['outcome'], registers: [this.registry] });
  readonly failures = new Counter({ name: 'dental_elig_failures_total', help: 'Failed verifications, by failure kind', labelNames: ['kind'], registers: [this.registry] });
  readonly pruned = new Counter({ name: 'dental_elig_pruned_total', help: 'Rows the job store was pruned of, past the retention period, by what they were', labelNames: ['what'], registers: [this.registry] });
  readonly prunedBodies = new Counter({ name: 'dental_elig_pruned_bodies_total', help: 'Verification bodies (their benefits) cut from the checks the job store keeps past the retention period', registers: [this.registry] });
  readonly webhooks = new Counter({ name: 'dental_elig_webhooks_total', help: 'Webhook deliveries, by what became of them (not-received: a result polling took before its webhook came)', labelNames: ['result'], registers: [this.registry] });
  readonly latency = new Histogram({
    name: 'dental_elig_request_duration_seconds',
    help: 'Calls to the verification service and the FHIR server',
    labelNames: ['target', 'operation', 'ok'],
    buckets: [0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30],
    registers: [this.registry],
  });

  /** When this process last wrote a check's eligibility to the chart: a batch's end, and an alarm for a pipeline that stalled. */
  readonly lastWritten = new Gauge({ name: 'dental_elig_last_written_timestamp_seconds', help: 'When this process last wrote eligibility to the chart (Unix time)', registers: [this.registry] });

  /** How many checks this process's worker holds: at the concurrency when the pipeline is saturated. */
  inHand: () => number = () => 0;
  /** Whether the worker finds the verification service answering (ServiceOutage). */
  serviceUp: () => boolean = () => true;
  /** How many payer portals the worker finds out on their own, the service answering for the others (ServiceOutage). */
  portalsOut: () => number = () => 0;

  /**
   * `failureKinds`: the kinds mappings/failure-kinds.json lists. Each series known beforehand starts
   * at 0 (a failure kind, Unknown too; what became of a webhook; a FHIR notification's ack): born at
   * its first event with 1, it showed Prometheus no increase, and an alert on increase() missed the
   * first failure of a kind after each start, a secret's every refusal in the first scrape's spell.
   */
  constructor(store: JobStore, now: () => Date, failureKinds: readonly string[] = []) {
    for (const kind of [...failureKinds, 'Unknown']) this.failures.inc({ kind }, 0);
    for (const result of ['applied', 'duplicate', 'ignored', 'dead', 'refused', 'not-received']) this.webhooks.inc({ result }, 0);
    for (const ack of ['stored', 'duplicate', 'dead', 'refused']) this.messages.inc({ type: 'fhir-notification', ack }, 0);
    // Read from this process when scraped: what the worker holds now, not a count kept beside it.
    const live = (name: string, help: string, read: () => number) =>
      new Gauge({
        name,
        help,
        registers: [this.registry],
        collect() {
          this.set(read());
        },
      });
    live('dental_elig_checks_in_hand', 'Checks the worker holds right now (at most concurrency plus chartConcurrency)', () => this.inHand());
    live('dental_elig_service_up', 'Whether the worker finds the verification service answering and taking its API key (0: out, checks waiting for it; one call at a time tries it)', () => (this.serviceUp() ? 1 : 0));
    live('dental_elig_payer_portals_out', 'Payer portals the worker finds out on their own, their checks waiting for them while the others go on (/healthz names them)', () => this.portalsOut());
    const checks = new Gauge({ name: 'dental_elig_checks', help: 'Checks by state', labelNames: ['state'], registers: [this.registry] });
    const depth = new Gauge({ name: 'dental_elig_queue_depth', help: 'Checks due now', registers: [this.registry] });
    const oldest = new Gauge({ name: 'dental_elig_oldest_due_age_seconds', help: 'How long the oldest due check has waited', registers: [this.registry] });
    const awaiting = new Gauge({ name: 'dental_elig_awaiting_insurance', help: 'Booked appointments waiting for the patient\'s insurance', registers: [this.registry] });
    const held = new Gauge({
      name: 'dental_elig_awaiting_correction',
      help: "HL7 bookings refused for the patient's details (AE), held until an ADT corrects them (jobs list names each; a dismissed letter leaves its visit here)",
      registers: [this.registry],
    });
    const deadLetters = new Gauge({ name: 'dental_elig_dead_letters', help: 'Dead letters kept for a person, by kind (jobs messages --dead; jobs replay or jobs dismiss lets one go)', labelNames: ['kind'], registers: [this.registry] });
    const forAPerson = new Gauge({
      name: 'dental_elig_checks_for_a_person',
      help: 'Checks needing attention or dead that no person has dismissed (jobs retry sends one again, jobs dismiss lets one go)',
      registers: [this.registry],
    });
    const storeUp = new Gauge({ name: 'dental_elig_store_up', help: 'Whether the job store answered this scrape (0: the store\'s gauges hold what it last said)', registers: [this.registry] });
    // Read from the store when scraped: the store, not this process, knows the queue. A store that
    // does not answer leaves the rest to be read: a scrape failing whole would look like a dead process.
    const collect = async () => {
      const at = now();
      const counts = await storeAnswer(store.counts(at.toISOString())).catch(() => undefined);
      storeUp.set(counts ? 1 : 0);
      if (!counts) return;
      checks.reset();
      for (const [state, n] of Object.entries(counts.checks)) checks.set({ state }, n);
      depth.set(counts.due);
      oldest.set(counts.oldestDueAt ? Math.max(0, (at.getTime() - Date.parse(counts.oldestDueAt)) / 1000) : 0);
      awaiting.set(counts.awaitingInsurance);
      held.set(counts.awaitingCorrection);
      // An alert on it clears once a person has dealt with each: dental_elig_checks counts them by state whatever a person did.
      forAPerson.set(counts.forAPerson);
      // Every kind, none at 0: an alert on dead letters clears once a person has replayed or dismissed them.
      for (const kind of MessageKind.options) deadLetters.set({ kind }, counts.messages[`${kind}:dead`] ?? 0);
    };
    this.collect = collect;
  }

  readonly collect: () => Promise<void>;

  async text(): Promise<string> {
    await this.collect();
    return `${await this.registry.metrics()}\n${await processMetrics().metrics()}`;
  }
}
