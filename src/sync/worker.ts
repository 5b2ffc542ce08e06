import { randomUUID } from 'node:crypto';
import { setTimeout as sleep } from 'node:timers/promises';
import * as z from 'zod';
import type { PayerResolution, PayerResolver } from '../domain';
import { describeIssue } from '../domain/issues';
import { FhirInputError } from '../adapters/fhir/operation-outcome';
import { minuteAt } from '../adapters/local-date';
import type { VerificationClient } from '../verification/client';
import { ServiceError, UNREADABLE_ANSWER } from '../verification/errors';
import { refusesSetup } from '../verification/failure-kinds';
import { failureKindIn, hasResult, outcomeKindOf, storedOutcome, toOutcome, type VerificationOutcome } from '../verification/outcome';
import { requestFromCheck } from '../verification/request-from-check';
import type { Accepted, InlineCredentials, VerificationRequest } from '../verification/wire';
import { CHART_REFUSED, ChartWriteError } from './chart-errors';
import { errorText, withoutQuotes } from './error-text';
import { planHoldsVisit, whyEnding } from './chart-resources';
import { answeredThisRound, CHART_WORK_STATES, resultKindOf, WORKABLE_STATES, type CheckRow, type CheckState, type JobStore, type StoreTx, type WrittenIds } from './job-store';
import { LoopHeadroom } from './loop-headroom';
import { onceASpell } from '../once-a-spell';
import { RateLimiter, type RateLimits } from './rate-limit';
import { chartCoverageChanged, clinicOf, externalIdFor, firstDateToCome, freshResultFor, givenUpUnverified, LOCAL, localCorrelationId, LOST_EACH_TIME, nextPeriodBegins, NOT_VERIFIED, planDroppedSince, reverifyAt, visitDayCome, type SchedulePolicy } from './schedule';
import { retryAsRead } from './operations';
import { forgetOutageStart, forgetThrottled, givenUpSince, keepOutageStart, keepThrottledSince, keptOutages } from './outage-record';
import { ServiceOutage, type Pass } from './service-outage';
import { storeOutage, watchOutages } from './store-outage';
import type { EligibilityWriter } from './write-back';

/**
 * The worker takes due checks from the store and moves each one step: send it to the service,
 * poll for a result that did not arrive by webhook, write a result into the chart, or verify
 * again before the visit. Every step ends in a store transaction that first re-reads the check,
 * so a step whose check was cancelled or corrected meanwhile changes nothing.
 */

export interface WorkerLog {
  debug?(obj: object, msg: string): void;
  info(obj: object, msg: string): void;
  warn(obj: object, msg: string): void;
  error(obj: object, msg: string): void;
}

export type SyncEventName = 'verified' | 'failed' | 'needs-attention' | 'written';

/** What an event says: ids and states, never patient data. */
export interface SyncEvent {
  key: string;
  state: CheckState;
  /** The check's clinic and the portal it was sent to (none before its first send): whose credentials, in a group of several offices. */
  clinicId: string;
  portalId?: string | undefined;
  correlationId?: string | undefined;
  outcome?: string | undefined;
  failureKind?: string | undefined;
  detail?: string | undefined;
}

/** An event of the check in `row`: which check it is, and where. */
function eventOf(row: CheckRow, event: Omit<SyncEvent, 'key' | 'clinicId' | 'portalId'>): SyncEvent {
  return { key: row.key, clinicId: row.check.clinicId, portalId: row.portalId, ...event };
}

/** The event of a verification's result the check in `row` takes, in `state`: verified, or failed naming its kind. */
export function resultEvent(row: CheckRow, outcome: VerificationOutcome, state: CheckState): { name: SyncEventName; event: SyncEvent } {
  const { correlationId } = outcome.verification;
  return {
    name: outcome.kind === 'failed' ? 'failed' : 'verified',
    event: eventOf(row, { state, correlationId, outcome: outcome.kind, ...(outcome.kind === 'failed' && { failureKind: outcome.failure.kind }) }),
  };
}

export interface WorkerOptions {
  /** Checks in hand for the service: being sent, polled, or waiting for either. */
  concurrency: number;
  /**
   * Checks in hand being written to the chart, apart from `concurrency`: a check with its result
   * gives its place for the service up while the chart takes its write, so the service's places
   * turn over at the service's pace, not at the service's and the chart's together.
   */
  chartConcurrency: number;
  /**
   * Above this share of the event loop's time spent busy, while something that arrived is being
   * handled, the worker keeps no more than an eighth of `concurrency` checks in hand: what arrives is
   * answered first (1: never held back).
   */
  loopBusyLimit: number;
  rateLimits: RateLimits;
  /** Attempts at sending one verification (and at a retry-later failure) before it is dead. */
  maxAttempts: number;
  backoff: { baseMs: number; maxMs: number };
  /** How long an asynchronous result may take by webhook before the worker polls for it. */
  webhookDeadlineMs: number;
  /** First poll of a Pending verification; later polls back off to backoff.maxMs. */
  pollAfterMs: number;
  /** Give up polling a verification that stays Pending this long: it needs a person. */
  pendingGiveUpMs: number;
  /**
   * Give up a check whose visit's day has come that the service keeps asking for fewer requests
   * (429) of this long after its round's first send: the front desk is told in time, and it is sent
   * again once a call of the service is answered. Others wait for pendingGiveUpMs.
   */
  throttledGiveUpMs: number;
  leaseMs: number;
  /** When the worker has nothing due, how often it looks again. */
  idleMs: number;
  policy: SchedulePolicy;
  /** Whether results can arrive by webhook; without it every verification is synchronous. */
  asyncEnabled: boolean;
  /** Credentials per portalId, for portals whose credentials are not stored with the service. */
  inlineCredentials?: Record<string, InlineCredentials>;
}

export interface WorkerDeps {
  store: JobStore;
  /** listPayers: a read of the service, with which the worker tries it itself while it is out and no check is left to (tryItself). */
  client: Pick<VerificationClient, 'verify' | 'requestVerification' | 'getVerification' | 'listPayers'>;
  resolver: () => PayerResolver;
  /**
   * For a payer the resolver does not know, which may have joined the network since its catalog
   * was fetched: a resolver brought up to date, or undefined when there is none newer now.
   */
  catalogAgain?: () => Promise<PayerResolver | undefined>;
  writer: () => Promise<EligibilityWriter>;
  now: () => Date;
  random?: () => number;
  log: WorkerLog;
  emit: (name: SyncEventName, event: SyncEvent) => void;
  /** Service and chart call durations, for metrics. */
  observe?: (what: 'service' | 'fhir', operation: string, seconds: number, ok: boolean) => void;
  /** How busy the event loop has been lately, 0 to 1 (default: this process's, LoopHeadroom). */
  loopBusy?: () => number;
  /**
   * How many arrivals (HL7 messages, webhook deliveries, notifications) are being handled now.
   * A busy loop holds checks back only while one is: with nothing waiting to be answered, holding
   * back only slows the batch. Default: as if one always were.
   */
  arriving?: () => number;
  /** A result polling took that a webhook was to bring (one is configured): its webhook had not come, or had not been taken. */
  webhookMissed?: (key: string) => void;
}

/** A change of a check's state; `keepsDismissal`: a person's dismissal of it holds through this change (see dismissed). */
export type Step = Partial<Omit<CheckRow, 'key' | 'check' | 'createdAt' | 'updatedAt' | 'dismissedAt'>> & { state: CheckState; keepsDismissal?: true };

/** The states a check is verified in, before it has a result: given up in one, it is answered in the chart (giveUp). */
const VERIFYING: readonly CheckState[] = ['received', 'submitted', 'awaiting-result'];

/** The start of a check's not-verified detail given up throttled on its visit's day (giveUp): those are sent again when a send is answered (givenUpThrottled). */
const THROTTLED_TODAY = 'The verification service put it off past the time a verification for a visit today may wait';
/** The plugin's own kind for a request the service (422) or the client refused, its detail the fields it named. */
const REQUEST_REFUSED = 'RequestRefused';
/** The same, where the fields are the office's setup alone (refusesSetup). */
const SETUP_REFUSED = 'SetupRefused';

/**
 * The longest a worker waits before it looks at a job store that has not answered again: a look
 * is one cheap query (or a refused connection), and checks left due wait for the next look after
 * the store is back, however long it was away.
 */
const STORE_RETRY_MAX_MS = 5000;

/** The wait before the next look at a job store whose last `failures` claims in a row failed: from idleMs, doubling, up to STORE_RETRY_MAX_MS. */
export function storeRetryWaitMs(idleMs: number, failures: number): number {
  return Math.min(idleMs * 2 ** failures, Math.max(idleMs, STORE_RETRY_MAX_MS));
}
/** The key the worker's own try of the service goes under: no check's (a check's key is never empty). */
const NO_CHECK = '';
/** The longest a service's answer waits in hand before the store is tried with it again, or a check whose step the store failed before it is given back: it holds a place of `concurrency`, and stop() ends the wait. */
const ANSWER_RETRY_MAX_MS = 1000;
/** Ticks (idleMs each, 5 s at the default) between reads of the store for portals another instance found back. */
const PORTALS_READ_TICKS = 10;

export class Worker {
  readonly owner = `worker-${randomUUID()}`;
  private readonly limiter: RateLimiter;
  /** The store, its outages told once (watchOutages). */
  private readonly store: JobStore;
  private readonly loopBusy: () => number;
  /** The checks in hand, by key, with the step under way: one this worker is still working on is never started again. */
  private readonly inHand = new Map<string, Promise<void>>();
  /** Of those, the ones whose chart write holds a place of chartConcurrency, and those waiting for one. */
  private writing = 0;
  /** Checks waiting for a chart place: each is handed one as a write ends (true), or told at stop() to give its work back (false). */
  private readonly waitingToWrite: Array<(handed: boolean) => void> = [];
  /**
   * Of those, the ones claimed as the chart's work (CHART_WORK_STATES), writing or waiting: the chart's
   * claims are counted by these, not by the places taken, or a synchronous result waiting for a place,
   * one after another while checks are sent, would keep the results stored meanwhile from being claimed.
   */
  private chartClaimed = 0;
  private timer: NodeJS.Timeout | undefined;
  private running = false;
  private ticking: Promise<void> | undefined;
  /** A kick that came while a claim was running: look again as soon as it is done, not after idleMs. */
  private kicked = false;
  /** Claims in a row the store failed: the worker waits longer after each, up to STORE_RETRY_MAX_MS. */
  private storeFailures = 0;
  /** One of them failed for another reason than an outage, and was said: its end is said too. */
  private claimFaulted = false;
  /** Steps in a row the store failed: each holds its check a little longer before it is given back (outagePause). */
  private stepOutages = 0;
  /**
   * Says a claim took checks another worker had leased: on PostgreSQL, an instance killed or stopped
   * mid-batch, whose checks this one takes up, as a restart on SQLite says of a process before it.
   */
  private readonly tookOver = (checks: number) => this.deps.log.info({ checks }, 'took up the checks another worker had in hand (its lease ran out, or its process is gone)');
  /** A service asking for fewer requests is said once a spell, not at each check's: see throttleNews. */
  private readonly throttleSaid = onceASpell(() => this.deps.now().getTime());
  /** Aborted by stop(): a wait for the store ends then, so a check held for it is given back at once (outageWait). */
  private stopping = new AbortController();
  /** Whether the store holds when a throttling's first check was given up (gaveUpThrottled: this worker kept it, or took it up at start), until a verification's send is answered. */
  private throttledKept = false;
  /** The check given up in a throttling this worker sent again first (tryThrottled), and its round: the others wait for its send's answer. */
  private throttleProbe: { key: string; round: number } | undefined;
  /** When the store was last read for a throttling another instance kept (verificationTaken). */
  private throttleReadAt = Number.NEGATIVE_INFINITY;
  /** When this worker found the service out, being kept (keepOutage): its end is recorded after it. */
  private outageKept: Promise<void> = Promise.resolve();
  /** The checks given up while the service was away, being sent again now that it answers (sendAgainGivenUp): stop() waits for them. */
  private sendingAgain: Promise<void> = Promise.resolve();
  /** The worker's own try of the service while it is out and no check is left to try it (tryItself). */
  private tryingItself: Promise<void> = Promise.resolve();
  /** When the store was last read for portals another instance found back (portalsBackElsewhere). */
  private portalsReadAt = Number.NEGATIVE_INFINITY;
  /** When the store was last read, of each portal, for an outage of it another instance found while this one hears it answer (backForOthers). */
  private readonly portalsHeardAt = new Map<string, number>();
  /** The outage a worker before this one found, being read at start (takeUpOutage). */
  private takingUp: Promise<void> | undefined;
  /**
   * Checks out of hand whose lease the store did not release (it was down): released before the
   * next claim, or no worker, this one included, would take them again until their leases ran out.
   */
  private readonly unreleased = new Set<string>();
  /** When this worker's chart writes began to fail, while they do: see chartFailed. */
  private chartFailingSince: Date | undefined;
  /**
   * The chart refusing this plugin's writes for who it is (401 with no token renewed, 403), since
   * when, until it takes one: /healthz says so, as the chart's /metadata it reads needs no token.
   */
  chartRefusing: { status: number; since: Date } | undefined;
  /**
   * Since when the service refuses this plugin's API key (401), until a call of it is answered:
   * every check goes to a person meanwhile, and /healthz and dental_elig_service_up say so, as
   * the service answering each refusal is not the service usable.
   */
  keyRefusedSince: Date | undefined;
  /** The service as this worker's calls find it: while it is out, checks wait for it in the store. */
  readonly service: ServiceOutage;

  constructor(
    private readonly options: WorkerOptions,
    private readonly deps: WorkerDeps,
  ) {
    const store = (this.store = watchOutages(deps.store, deps.log));
    this.service = new ServiceOutage(options.backoff, () => deps.now().getTime(), deps.log, {
      went: (since, portal) => void (this.outageKept = this.outageKept.then(() => this.keepOutage(since, portal))),
      // One after the other: an outage of the service and one of a portal may end at one answer.
      back: (since, portal) => void (this.sendingAgain = this.sendingAgain.then(() => this.sendAgainGivenUp(since, portal))),
    });
    const headroom = new LoopHeadroom();
    this.loopBusy = deps.loopBusy ?? (() => headroom.busy());
    this.limiter = new RateLimiter(
      options.rateLimits,
      store.takeRateToken ? (bucket, perSecond) => store.takeRateToken?.(bucket, perSecond, deps.now().toISOString()) ?? Promise.resolve(0) : undefined,
    );
  }

  start(): void {
    if (this.running) return;
    this.running = true;
    if (this.stopping.signal.aborted) this.stopping = new AbortController();
    // Before the first claim: with the service still out, its first call is the one trying it.
    this.takingUp = this.takeUpOutage().finally(() => this.kick());
  }

  /** Stops taking checks and waits for the ones in hand, but for those waiting for a chart place (given back, their work stored); their leases are released. */
  async stop(): Promise<void> {
    this.running = false;
    this.stopping.abort();
    // Their work is stored (a result to write, a Coverage to end): given back, not waited for behind a slow chart.
    for (const wake of this.waitingToWrite.splice(0)) wake(false);
    await this.takingUp;
    if (this.timer) clearTimeout(this.timer);
    await this.ticking;
    await Promise.allSettled([...this.inHand.values()]);
    await this.tryingItself;
    // Begun by the calls just waited for, on a store the caller closes once this returns.
    await this.outageKept;
    await this.sendingAgain;
  }

  /** Look for due work now (new checks were stored, a webhook arrived). */
  kick(): void {
    if (!this.running) return;
    if (this.ticking) {
      this.kicked = true;
      return;
    }
    if (this.timer) clearTimeout(this.timer);
    this.timer = setTimeout(() => void this.tick(), 0);
  }

  /** Checks in hand right now. */
  get busy(): number {
    return this.inHand.size;
  }

  private async tick(): Promise<void> {
    this.timer = undefined;
    if (!this.running || this.ticking) return;
    this.kicked = false;
    const ticking = this.claimAndRun().then(
      (read) => {
        if (!read) return;
        if (this.claimFaulted) this.deps.log.info({ failures: this.storeFailures }, 'the worker reads the job store again');
        this.storeFailures = 0;
        this.claimFaulted = false;
      },
      (err: unknown) => {
        this.storeFailures++;
        // Said once, not at every look: an outage by the store's watch, another failure here; meanwhile it is what healthz and metrics say.
        if (storeOutage(err) || this.claimFaulted) return;
        this.claimFaulted = true;
        this.deps.log.error({ err: errorText(err) }, 'worker could not read the job store; trying again, less and less often');
      },
    )
      // Part of the tick, so stop() waits for its read of the store and a kick meanwhile starts no second tick beside it.
      .then(() => this.portalsBackElsewhere());
    this.ticking = ticking;
    await ticking;
    this.ticking = undefined;
    this.tryItself();
    if (!this.running || this.timer) return;
    // A kick during a failing claim may be the store answering again (a message just stored): look at once.
    const wait = this.kicked ? 0 : this.storeFailures > 0 ? storeRetryWaitMs(this.options.idleMs, this.storeFailures) : this.options.idleMs;
    this.timer = setTimeout(() => void this.tick(), wait);
  }

  /**
   * How many more checks to take now (`limit`), and of each work: the chart's up to
   * chartConcurrency of it in hand, the service's into its own places, never more in hand than both
   * kinds of place hold (a synchronous result waits for a chart place in hand, in turn with the
   * chart's work claimed). While the loop is busy past loopBusyLimit and something that arrived
   * waits for its answer, only up to a floor (an eighth of concurrency) is kept in hand, so the
   * batch goes on but leaves room for what arrives; each check that ends looks again.
   */
  private room(): { limit: number; chart: number; service: number } {
    const floor = Math.max(1, Math.floor(this.options.concurrency / 8));
    const held = this.options.loopBusyLimit < 1 && (this.deps.arriving?.() ?? 1) > 0 && this.loopBusy() > this.options.loopBusyLimit;
    const limit = (held ? floor : this.options.concurrency + this.options.chartConcurrency) - this.inHand.size;
    const charting = this.writing + this.waitingToWrite.length;
    return {
      limit,
      chart: Math.max(0, Math.min(limit, this.options.chartConcurrency - this.chartClaimed)),
      service: Math.max(0, Math.min(limit, this.options.concurrency - (this.inHand.size - charting))),
    };
  }

  /**
   * Runs a chart write in a place of chartConcurrency, waiting for one: a synchronous result's
   * place for the service is free meanwhile, and the worker takes another check into it. Once
   * stop() is called, a write that would wait for a place is not made: its work is in the store
   * (result-stored, ending-coverage), and the check is given back for the next start or another
   * instance, so a slow chart does not hold the stop for a write at a time.
   */
  private async inChartPlace(write: () => Promise<void>): Promise<void> {
    if (this.writing >= this.options.chartConcurrency) {
      if (!this.running) return;
      const turn = new Promise<boolean>((resolve) => this.waitingToWrite.push(resolve));
      this.kick();
      if (!(await turn)) return;
    } else {
      this.writing++;
      this.kick();
    }
    try {
      await write();
    } finally {
      // The place goes to the next waiting, or is free.
      const next = this.waitingToWrite.shift();
      if (next) next(true);
      else this.writing--;
    }
  }

  /**
   * Takes due checks in hand, the chart's work first (a result goes into the chart as a place
   * frees, however many checks are still to send); false when there was no room to take any, so
   * the store was not read.
   */
  private async claimAndRun(): Promise<boolean> {
    const { limit, chart, service } = this.room();
    if (chart === 0 && service === 0) return false;
    for (const key of this.unreleased) {
      await this.store.release(key, this.owner);
      this.unreleased.delete(key);
    }
    const rows = await this.store.claimDue({ now: this.deps.now().toISOString(), limit, chart, service, owner: this.owner, leaseMs: this.options.leaseMs, tookOver: this.tookOver });
    if (this.running) {
      this.runEach(rows);
      return true;
    }
    // stop() came while the claim was under way: what it took is given back, not begun.
    for (const row of rows) await this.store.release(row.key, this.owner).catch(() => this.unreleased.add(row.key));
    return true;
  }

  /** Runs each check claimed, in hand until its step ends. */
  private runEach(rows: CheckRow[]): void {
    for (const row of rows) {
      // Claimed again while its step is still in flight (its lease ran out in a stall): one copy is enough.
      if (this.inHand.has(row.key)) continue;
      // A service call may take longer than the lease (retries, rate-limit waits): the lease is kept
      // while the step runs, so no worker claims the check and sends it a second time meanwhile.
      const heartbeat = setInterval(() => void this.extendLease(row.key), this.options.leaseMs / 3);
      heartbeat.unref();
      const chart = CHART_WORK_STATES.includes(row.state);
      if (chart) this.chartClaimed++;
      const job: Promise<void> = this.run(row)
        .then(() => void (this.stepOutages = 0), (err: unknown) => this.stepFailed(row, err))
        .finally(() => {
          clearInterval(heartbeat);
          if (chart) this.chartClaimed--;
          this.inHand.delete(row.key);
          void this.store.release(row.key, this.owner).catch(() => this.unreleased.add(row.key));
          this.kick();
        });
      this.inHand.set(row.key, job);
    }
  }

  /** Tells the listeners; one that throws is logged and changes nothing of the check (its step is done). */
  private emit(name: SyncEventName, event: SyncEvent): void {
    try {
      this.deps.emit(name, event);
    } catch (err) {
      this.deps.log.error({ key: event.key, event: name, err: errorText(err) }, 'a listener of the sync events failed');
    }
  }

  private async extendLease(key: string): Promise<void> {
    try {
      const held = await this.store.extendLease({ key, owner: this.owner, now: this.now(), leaseMs: this.options.leaseMs });
      if (!held) this.deps.log.warn({ key }, 'the lease on a check in hand was lost; another worker may send it too');
    } catch (err) {
      if (!storeOutage(err)) this.deps.log.warn({ key, err: errorText(err) }, 'could not extend the lease on a check in hand');
    }
  }

  /**
   * A step threw something no step handles (a fault of this program or of a part it uses). The
   * check is not claimed again at once, which would repeat the fault in a hot loop: it waits a
   * backoff, and after maxAttempts such failures it is dead, for a person to look at.
   */
  private async stepFailed(row: CheckRow, err: unknown): Promise<void> {
    // The store failed under the step, not the check: no attempt is used and no backoff stored. The
    // check is taken again as it stands once the store answers (its lease released before the next claim).
    if (storeOutage(err)) return this.outagePause();
    const detail = errorText(err);
    this.deps.log.error({ key: row.key, state: row.state, err: detail }, 'check step failed');
    try {
      const current = await this.store.transaction((tx) => tx.getCheck(row.key));
      if (!current || current.round !== row.round || !WORKABLE_STATES.includes(current.state)) return;
      // A cancelled check's verification is let go rather than given up: nothing is written for a visit cancelled.
      if (current.state === 'cancelled') return void (await this.step(current, 'cancelled', { state: 'cancelled', dueAt: undefined }));
      // A step that stored its outcome before the fault scheduled what comes next (a re-verification, a poll): that stands.
      if (current.dueAt === undefined || Date.parse(current.dueAt) > this.deps.now().getTime()) return;
      // A send the step already counted is not counted twice.
      const attempts = Math.max(current.attempts, row.attempts + 1);
      if (attempts >= this.options.maxAttempts) {
        await this.giveUp(current, current.state, attempts, detail, 'This plugin failed at each attempt');
        return;
      }
      await this.step(current, current.state, { state: current.state, attempts, dueAt: this.later(this.backoff(attempts)), lastError: detail });
    } catch (stored) {
      if (storeOutage(stored)) return;
      this.deps.log.error({ key: row.key, err: errorText(stored) }, 'could not record a failed step; the check is tried again once the job store answers');
    }
  }

  private async run(row: CheckRow): Promise<void> {
    switch (row.state) {
      case 'received':
      case 'submitted':
        return this.submit(row);
      case 'awaiting-result':
        return this.poll(row);
      case 'result-stored':
        return this.write(row);
      case 'written':
        return this.reverify(row);
      case 'ending-coverage':
        // A chart write as a result's is: it holds a chart place, not a place for the service.
        return this.inChartPlace(() => this.endCoverage(row));
      case 'cancelled':
        return this.followCancelled(row);
      default:
        return;
    }
  }

  // ------------------------------------------------------------------ sending

  private async submit(row: CheckRow): Promise<void> {
    const request = await this.requestOf(row);
    if ('refused' in request) return this.storeLocalFailure(row, ...request.refused);
    const { mode, portalId } = request;

    const pass = this.service.admit(this.urgent(row), portalId, row.key);
    if (pass === 'hold') return this.hold(row, portalId, row.state, { state: row.state });
    try {
      const attempts = row.attempts + 1;
      // The round's first send: a send again (after a 404 on poll, a transient failure) does not restart pendingGiveUpMs.
      // As stored, not as in hand: a clock stepped back since the claim has it dated back (dateBackChecks).
      const sent = await this.step(
        row,
        row.state,
        async (current, tx) => (await this.sharedVerification(tx, current)) || { state: 'submitted', attempts, mode, portalId, submittedAt: current.submittedAt ?? this.now() },
      );
      if (sent?.state !== 'submitted') return;
      await this.limiter.take(portalId);
      try {
        const answer = await this.send(pass, sent, request);
        if ('outcome' in answer) {
          await this.outcomeArrived(sent, answer.outcome);
        } else {
          const { accepted, pollInMs } = answer;
          const waiting = await this.kept(() => this.step(sent, 'submitted', { state: 'awaiting-result', correlationId: accepted.correlationId, dueAt: this.later(pollInMs), lastError: undefined }));
          if (!waiting) await this.tookCancelled(sent, accepted.correlationId, undefined, pollInMs);
        }
      } catch (err) {
        // Refused for what it is (a 422, a 403): the service's rate limit let it through.
        if (err instanceof ServiceError && err.status !== undefined && !err.mayPassLater) this.verificationTaken();
        // Sent before under this externalId with its answer lost (it waited as submitted): a failure answered to this send
        // says nothing of that one, which the service may have taken.
        const mayBeThere = row.state === 'submitted' || (err instanceof ServiceError && answerLost(err));
        await this.serviceFailed(sent, 'submitted', err, mayBeThere);
        // Cancelled while it was sent (its visit moved, say), the send answered a failure: nothing of it is at the service
        // for another visit to wait for (stillAtService). One with no answer may have reached it: it is sent again
        // under its externalId to find out (followCancelled).
        if (err instanceof ServiceError) await this.step(sent, 'cancelled', mayBeThere ? { state: 'cancelled', dueAt: this.later(this.backoff(sent.attempts)) } : { state: 'cancelled', submittedAt: undefined, dueAt: undefined });
      }
    } finally {
      this.service.done(pass, row.key);
    }
  }

  /**
   * The request a check is sent as, built before it is marked sent: one that cannot be built is
   * answered (`refused`: the failure kind, title and detail to store), not retried. `sentBy`: the mode
   * and portal it went by, for a send repeated to learn what became of the first, which the service
   * knows by its externalId under them.
   */
  private async requestOf(row: CheckRow, sentBy?: { mode: 'sync' | 'async'; portalId: string }): Promise<Request | { refused: [kind: string, title: string, detail: string] }> {
    const { payer } = row.check.coverage;
    let resolution = this.deps.resolver().resolve(payer);
    if (resolution.status === 'unknown') resolution = (await this.deps.catalogAgain?.())?.resolve(payer) ?? resolution;
    if (resolution.status !== 'resolved') {
      const why = resolution.status === 'ambiguous' ? 'names several payers in the catalog' : 'matches no payer in the catalog';
      return { refused: ['PayerNotResolved', 'Payer not resolved', `the payer on this coverage ${why}`] };
    }
    const { mode, portalId } = sentBy ?? this.routeOf(resolution);
    if (!portalId) return { refused: ['NoPortal', 'No portal', `no portal verifies ${resolution.name}`] };
    try {
      const body = requestFromCheck(
        { ...row.check, coverage: { ...row.check.coverage, resolution } },
        {
          mode,
          portalId,
          externalId: row.externalId,
          ...(this.options.inlineCredentials?.[portalId] && { credentials: this.options.inlineCredentials[portalId] }),
        },
      );
      return { body, mode, portalId };
    } catch (err) {
      if (!(err instanceof z.ZodError)) throw err;
      return { refused: [REQUEST_REFUSED, 'Request not sent', `the request built from this check is not valid: ${describeIssue(err)}`] };
    }
  }

  /**
   * A built request sent as its mode asks, a verification's send taken (verificationTaken): the synchronous answer, or
   * the verification accepted and when to poll it. A send repeated under its externalId (its first answer lost) may be
   * answered with a verification already done, whose webhook came while no check had its correlation id: polled at
   * once, not after the deadline.
   */
  private async send(pass: Pass, row: CheckRow, { body, mode, portalId }: Request): Promise<{ outcome: VerificationOutcome } | { accepted: Accepted; pollInMs: number }> {
    if (mode === 'sync') {
      const outcome = await this.serviceCall(pass, row.key, portalId, 'verify', () => this.deps.client.verify(body), (answer) => this.portalHeard(pass, row, answer, true));
      this.verificationTaken();
      return { outcome };
    }
    const accepted = await this.serviceCall(pass, row.key, portalId, 'request verification', () => this.deps.client.requestVerification(body), () => this.service.accepted(pass, row.key, portalId));
    this.verificationTaken();
    return { accepted, pollInMs: resultReady(accepted) ? 0 : this.options.webhookDeadlineMs };
  }

  /** How a resolved payer is verified: asynchronously where it and this worker can, on the first portal its catalog entry lists for the mode. */
  private routeOf(resolution: Extract<PayerResolution, { status: 'resolved' }>): { mode: 'sync' | 'async'; portalId: string | undefined } {
    const mode = this.options.asyncEnabled && resolution.supportsAsync && resolution.asyncPortals.length > 0 ? 'async' : 'sync';
    return { mode, portalId: (mode === 'async' ? resolution.asyncPortals : resolution.syncPortals)[0] ?? resolution.asyncPortals[0] };
  }

  /**
   * A send the service refused naming the payer or the portal may have been built from a catalog
   * older than the service's network (the payer gave up asynchronous verification, or moved to
   * another portal, since it was fetched). With the catalog brought up to date (or as it is, when it
   * was just), a check whose payer is now verified another way is sent again that way, as a new
   * round, its body having changed; true when it was. Otherwise the refusal stands.
   */
  private async sentAnotherWay(row: CheckRow, err: ServiceError): Promise<boolean> {
    const network = (err.problem.errors ?? []).some((e) => e.field === 'portalId' || e.field === 'payer' || e.field?.startsWith('payer.'));
    if (!network) return false;
    const catalog = (await this.deps.catalogAgain?.()) ?? this.deps.resolver();
    const resolution = catalog.resolve(row.check.coverage.payer);
    if (resolution.status !== 'resolved') return false;
    const now = this.routeOf(resolution);
    if (!now.portalId || (now.mode === row.mode && now.portalId === row.portalId)) return false;
    const round = row.round + 1;
    const why = `the service refused the request as built for ${row.mode ?? 'its'} verification on portal ${row.portalId ?? '(none)'}; the payer network changed, sending again`;
    const moved = await this.step(row, 'submitted', { state: 'received', round, externalId: externalIdFor(row.key, row.fingerprint, round), correlationId: undefined, submittedAt: undefined, dueAt: this.now(), lastError: why });
    if (moved) this.deps.log.info({ key: row.key, was: { mode: row.mode, portalId: row.portalId }, now }, 'the payer network changed since the request was built; sending it again the way the payer takes now');
    return moved !== undefined;
  }

  /**
   * A round still to be sent whose plan is verified for another visit: by a result that came since
   * it was booked, which it takes (freshResultFor), or by a verification sent first (under way, or
   * still to be sent and booked before it), which it waits for rather than send a second. Two
   * visits of one plan booked together are one verification. Undefined: it is sent.
   *
   * One to be sent again under its externalId, its send's answer lost (submitted), takes such a
   * result too: its first send may never have reached the service, and sent again it would be a
   * second verification (the moved visit's, sent once its cancelled check was let go, that check's
   * result come late). Its own send is given up (no submittedAt: a later cancellation of it is no
   * verification under way, stillAtService). It waits for none: its own may be under way.
   */
  private async sharedVerification(tx: StoreTx, row: CheckRow): Promise<Step | undefined> {
    if (row.state !== 'received' && row.state !== 'submitted') return undefined;
    const { policy, pollAfterMs } = this.options;
    // A re-verification takes only a result still fresh on the visit's day, as reverify does.
    const fresh = await freshResultFor(tx, row, { now: this.deps.now(), policy }, (other) => row.round === 0 || freshAtVisit(row, other, policy));
    if (fresh) return { ...fresh, dueAt: this.now(), lastError: undefined, ...(row.state === 'submitted' && { submittedAt: undefined }) };
    if (row.state === 'submitted') return undefined;
    const first = (await tx.verifying(row.coverageFingerprint)).find(
      (other) =>
        other.key !== row.key &&
        (other.state !== 'cancelled' || this.stillAtService(other)) &&
        // A visit in another year is another benefit period, most often: a result of the one would not serve the other.
        other.check.dateOfService.slice(0, 4) === row.check.dateOfService.slice(0, 4) &&
        (other.state !== 'received' || `${other.createdAt} ${other.key}` < `${row.createdAt} ${row.key}`),
    );
    return first && { state: 'received', dueAt: this.later(pollAfterMs), lastError: 'waiting for the verification of this plan under way for another visit' };
  }

  /**
   * A check cancelled while its request was at the service (its visit moved, say) still takes that
   * verification's result, which the moved visit's check then reuses: it is a verification under way
   * while it is followed for it (followCancelled), or, its send's answer not back yet, for
   * webhookDeadlineMs. Past that, the other visit is verified on its own. Not one whose send failed,
   * or that waited to be sent (again) when it was cancelled: it has no submittedAt. Not one cancelled for its
   * plan being dropped: the plan stated again does not take its result (freshResultFor), so waiting
   * for it only puts the other visit's verification off.
   */
  private stillAtService(row: CheckRow): boolean {
    if (row.submittedAt === undefined || answeredThisRound(row) || row.planDroppedAt !== undefined) return false;
    return row.dueAt !== undefined || Date.parse(row.updatedAt) + this.options.webhookDeadlineMs > this.deps.now().getTime();
  }

  /**
   * An answer of the service's for a check cancelled meanwhile, kept on it (cancelledTakes) rather than dropped; a verification
   * accepted is followed for its result, polled in `pollInMs`. `notTaken`: the step where it keeps nothing.
   */
  private async tookCancelled(
    row: CheckRow,
    correlationId: string,
    outcome?: VerificationOutcome,
    pollInMs = this.options.webhookDeadlineMs,
    notTaken: (current: CheckRow) => Step = () => ({ state: 'cancelled' }),
  ): Promise<void> {
    const at = this.now();
    const follow = outcome === undefined && { dueAt: this.later(pollInMs) };
    let took = false;
    const cancelled = await this.kept(() => this.step(row, 'cancelled', (current) => {
      // Read in the transaction: a result a webhook brought meanwhile is taken, and told, once.
      const kept = cancelledTakes(current, correlationId, at, outcome);
      // Set at each run: a transaction run again (PostgreSQL) tells what the one that committed took.
      took = kept?.result !== undefined;
      return kept ? { ...kept, ...follow } : notTaken(current);
    }));
    if (cancelled && took && outcome) this.emitResult(cancelled, outcome);
  }

  /** A verification's result a cancelled check took: the service did it, so it is told (and counted) once, as any check's, though nothing of it is written. */
  private emitResult(cancelled: CheckRow, outcome: VerificationOutcome): void {
    const { name, event } = resultEvent(cancelled, outcome, 'cancelled');
    this.emit(name, event);
  }

  /**
   * A check cancelled with its verification at the service is polled for its result as one awaiting
   * it is (the webhook lost, as one sent while this instance was down is after three tries), so that
   * another visit of the plan takes it; until pendingGiveUpMs from its send, then let go. Whatever the
   * service answers, nothing is written and no person is told: the visit is cancelled.
   *
   * One cancelled while its send's answer was lost (its worker killed before it kept that answer, or
   * the send timed out) is sent again under its externalId, by the mode and portal it went by: the
   * service answers with the verification it made of the first (or makes it now, the first never
   * having reached it), whose correlation id it is then followed by, or whose synchronous result it
   * keeps. Left alone, the other visit of its plan would be verified a second time once
   * webhookDeadlineMs had passed (stillAtService).
   */
  private async followCancelled(row: CheckRow): Promise<void> {
    const askAgain = row.correlationId === undefined && row.submittedAt !== undefined && row.planDroppedAt === undefined;
    // Let go of, one asked again no longer counts as at the service: the other visit is verified on its own at once.
    const letGo = { state: 'cancelled' as const, dueAt: undefined, ...(askAgain && { submittedAt: undefined }) };
    const built = askAgain && row.mode !== undefined && row.portalId !== undefined ? await this.requestOf(row, { mode: row.mode, portalId: row.portalId }) : undefined;
    const again = built && !('refused' in built) ? built : undefined;
    // Marked with its plan's drop while a poll or send of it was on its way (endDroppedPlans), whose step followed it again:
    // its result serves no visit (freshResultFor), so it is let go here rather than polled until it comes.
    if ((row.correlationId === undefined && again === undefined) || answeredThisRound(row) || row.planDroppedAt !== undefined || this.pendingPast(row, 0)) {
      await this.step(row, 'cancelled', letGo);
      return;
    }
    const portal = again?.portalId;
    const pass = this.service.admit(false, portal, row.key);
    if (pass === 'hold') {
      await this.step(row, 'cancelled', { state: 'cancelled', dueAt: this.later(this.service.holdFor((this.deps.random ?? Math.random)(), portal, row.key)) });
      return;
    }
    try {
      await this.limiter.take(portal);
      if (again) {
        // What the service answers is kept as the first send's answer would have been.
        const answer = await this.send(pass, row, again);
        if ('outcome' in answer) await this.tookCancelled(row, answer.outcome.verification.correlationId, answer.outcome);
        else await this.tookCancelled(row, answer.accepted.correlationId, undefined, answer.pollInMs);
        return;
      }
      const outcome = await this.serviceCall(pass, row.key, undefined, 'get verification', () => this.deps.client.getVerification(row.correlationId as string, row.externalId));
      // Its portal's answer all the same, as a poll's and the webhook's of a cancelled check are.
      this.portalHeard('go', row, outcome);
      // Still pending, it is polled again; its result come meanwhile (the webhook's), it is followed no longer.
      await this.tookCancelled(row, row.correlationId as string, outcome, undefined, (current) =>
        answeredThisRound(current) ? { state: 'cancelled' } : { state: 'cancelled', dueAt: this.later(this.pollWait(row)) },
      );
    } catch (err) {
      if (!(err instanceof ServiceError)) throw err;
      // A fault that may pass is tried again at the next poll's time, no sooner than the service asks (Retry-After), as a poll's
      // is (serviceFailed); one that will not (the verification unknown to the service, the request refused) ends it.
      const wait = Math.max(this.pollWait(row), err.retryAfterMs ?? 0);
      await this.step(row, 'cancelled', err.mayPassLater ? { state: 'cancelled', dueAt: this.later(wait) } : letGo);
    } finally {
      this.service.done(pass, row.key);
    }
  }

  /** `mayBeThere`: a send whose answer was lost, this one or an earlier one of its round under its externalId (submit). */
  private async serviceFailed(row: CheckRow, from: CheckState, err: unknown, mayBeThere = false): Promise<void> {
    if (!(err instanceof ServiceError)) throw err;
    const status = err.status;
    if (refusedForFields(err) && from === 'submitted' && (err.problem.errors ?? []).some((e) => e.field === 'externalId')) {
      // The service holds another request under this externalId: a send whose answer was lost, its
      // body changed since (the payer catalog synced again, inline credentials rotated). Nothing in the
      // data is wrong, so it is not the front desk's to fix: this one goes as a verification of its own.
      if (row.attempts >= this.options.maxAttempts) return this.giveUp(row, from, row.attempts, '422: the service refused each externalId', 'The verification service refused each request for it');
      const round = row.round + 1;
      await this.step(row, from, { state: 'received', round, externalId: externalIdFor(row.key, row.fingerprint, round), correlationId: undefined, submittedAt: undefined, dueAt: this.now(), lastError: 'the service holds another request under this externalId; sending as a new verification' });
      return;
    }
    if (refusedForFields(err) || err.code === 'invalid_request') {
      if (from === 'submitted' && (await this.sentAnotherWay(row, err))) return;
      // The data is wrong: the front desk sees it in the chart and corrects it at the source; the office's setup, its administrator.
      const fields = err.fieldErrors.join('; ');
      const kind = refusesSetup((err.problem.errors ?? []).map((e) => e.field ?? '')) ? SETUP_REFUSED : REQUEST_REFUSED;
      return this.storeLocalFailure(row, kind, 'Request refused', fields || (err.problem.detail ?? 'the service refused the request'), from);
    }
    if (err.code === UNREADABLE_ANSWER) {
      // Sent again, it would be answered the same: a person reads what the service sent, kept as the check's result.
      const summary = `${err.problem.title ?? 'unreadable answer'}: ${err.problem.detail ?? 'the service answered with a body this plugin cannot read'}`;
      if (await this.toPerson(row, from, { state: 'needs-attention', dueAt: undefined, result: err.received, lastError: summary })) {
        this.emit('needs-attention', eventOf(row, { state: 'needs-attention', correlationId: row.correlationId, detail: 'answer unreadable' }));
      }
      return;
    }
    if (status === 404 && from === 'awaiting-result') {
      // The service does not know the verification: send it again under the same externalId, as
      // one more attempt, so a service that keeps forgetting it is not sent it forever.
      if (row.attempts >= this.options.maxAttempts) {
        await this.giveUp(row, from, row.attempts, '404: the service did not know the verification', LOST_EACH_TIME);
        return;
      }
      await this.step(row, from, { state: 'received', dueAt: this.now(), correlationId: undefined, lastError: 'the service did not know the verification; sending again' });
      return;
    }
    const retryable = err.mayPassLater;
    const summary = `${status ?? err.code ?? 'network'}: ${err.problem.title ?? 'service error'}`;
    if (!retryable) {
      // 401, 403, 404: configuration, not data. Someone fixes the key, the clinic or the portal and retries.
      // Said only when the check moved: a webhook may have applied its result meanwhile.
      if (!(await this.toPerson(row, from, { state: 'needs-attention', dueAt: undefined, lastError: summary }))) return;
      this.emit('needs-attention', eventOf(row, { state: 'needs-attention', detail: summary }));
      // Whose: a 403 is what one clinic's registration or key may not do, where a group's offices share a serve.
      this.deps.log.warn({ key: row.key, status, clinicId: row.check.clinicId, portalId: row.portalId }, 'verification refused by the service; needs attention');
      return;
    }
    // The service out, this failure one of those that say so: the check waits for it, its send not counted.
    const portal = from === 'awaiting-result' ? undefined : row.portalId;
    if (this.service.covers(portal) && !this.urgent(row)) {
      return this.hold(row, portal, from, from === 'submitted' ? { state: mayBeThere ? 'submitted' : 'received', attempts: row.attempts - 1 } : { state: from }, summary);
    }
    // A service that says how long to leave it alone is asked again no sooner. Such a send is not
    // counted against maxAttempts: the budget for waiting on it is pendingGiveUpMs from the round's first send (a 429's
    // on its visit's day, throttledGiveUpMs).
    const retryAfter = err.retryAfterMs;
    // A send of a check its portal fails alone (answering the others) is not put off for the service's load: it
    // counts, or one member id the portal chokes on, answered with a Retry-After each time, would be sent for pendingGiveUpMs.
    // A 429 is put off still: the service asking for less says nothing of the check (those that found their portal out
    // are left alone too, and the burst of them sent once it answers would be given up for it), with or without a
    // Retry-After: a gateway's rate limit often says none, and a morning's batch throttled for minutes was written into
    // every chart as not verified. Any other failure asking to wait does not put off a check whose visit's day has come:
    // its attempts count, as when the service is out, or the front desk would hear nothing until pendingGiveUpMs, past the visit;
    // nor does a 429 for longer than throttledGiveUpMs.
    const putOff = from === 'submitted' && (status === 429 || (retryAfter !== undefined && !this.service.failsAlone(row.key) && !this.urgent(row)));
    if (from === 'submitted') {
      // Throttled on its visit's day, it waits no longer than throttledGiveUpMs: a service asking for less all day would
      // leave the front desk untold until after the visit, and a 429 being no outage, nothing would send it again after
      // its attempts were counted; it is sent again once a verification's send is answered, as one given up in an outage at its end.
      // One the chart already says not verified of (given up before, sent again: the first of a throttling's, tryThrottled)
      // has nothing new to tell it: it waits as any other, the throttling's try, and is not written again at each; but not
      // past its visit's day, which pendingGiveUpMs outlasts: sent all night, a send taken then was a verification billed for a visit over.
      // Its own give-up, under its externalId (externalIdAgain): not any failure of this plugin's, a setup refused, say, retried once fixed,
      // the chart saying nothing of its benefits not verified.
      const told = row.written?.verification === localCorrelationId(row.externalId);
      const throttledToday = status === 429 && this.urgent(row) && !told;
      const giveUpMs = throttledToday ? Math.min(this.options.pendingGiveUpMs, this.options.throttledGiveUpMs) : this.options.pendingGiveUpMs;
      const visitOver = putOff && told && this.visitOver(row);
      const usedUp = putOff ? visitOver || this.pendingPast(row, retryAfter ?? 0, giveUpMs) : row.attempts >= this.options.maxAttempts;
      if (usedUp) {
        const putOffWhy = throttledToday ? THROTTLED_TODAY : visitOver ? "The verification service put it off until the visit's day was over" : 'The verification service put it off past the time a verification may wait';
        const why = putOff ? putOffWhy : `The verification service was unavailable or did not answer (last: ${status ?? err.code ?? 'network'})`;
        const at = this.deps.now();
        // Sends put off are not counted: how many there were says nothing.
        await this.giveUp(row, from, putOff ? undefined : row.attempts, summary, why);
        if (throttledToday) this.gaveUpThrottled(at);
        return;
      }
    }
    // A poll the service puts off beyond the time a verification may stay pending is for a person now, not after the wait.
    if (from === 'awaiting-result' && retryAfter !== undefined && this.pendingPast(row, retryAfter)) {
      await this.pendingTooLong(row);
      return;
    }
    // A send whose answer was lost stays sent, whatever its retries are answered: the service may have taken it, so a
    // cancellation meanwhile has it asked again under its externalId (followCancelled), and a webhook for it finds it (sentUnder), as one in hand would.
    const next: CheckState = from === 'submitted' && !mayBeThere ? 'received' : from;
    // Put off for no load of the service's (its portal failing this check alone, a Retry-After each time), a send waits a
    // tenth of the time its round has, up to backoff.maxMs: its attempts held, its backoff did not grow, and one such check
    // was sent every ten seconds for pendingGiveUpMs, 8,000 rounds a day (audit-leaks). A 429's wait is the service's to say;
    // one that says none waits as long, its backoff not growing either.
    const heldBack = putOff && (status !== 429 || retryAfter === undefined) ? Math.min(this.options.backoff.maxMs, (this.deps.now().getTime() - Date.parse(row.submittedAt ?? row.updatedAt)) / 10) : 0;
    const wait = Math.max(from === 'awaiting-result' ? this.pollWait(row) : this.backoff(row.attempts), retryAfter ?? 0, heldBack);
    if (!(await this.step(row, from, { state: next, ...(putOff && { attempts: row.attempts - 1 }), dueAt: this.later(wait), lastError: summary }))) return;
    // The status or network code only: a problem's title and detail may quote what was sent.
    const fields = { key: row.key, step: from === 'submitted' ? 'send' : 'poll', failure: status ?? err.code ?? 'network', attempts: row.attempts, retryInMs: wait };
    // Put off as its last send was: at warn for the first of such a run only (their warnings were 43 % of audit-leaks' log).
    if (status !== 429 && putOff && row.lastError === summary) return void this.deps.log.debug?.(fields, 'the service failed; will retry');
    if (status !== 429) return void this.deps.log.warn(fields, 'the service failed; will retry');
    // Asking for fewer requests, it asks it of every check sent meanwhile: a warning each (and four retries each) was some
    // twenty a check a minute, saying the one thing an operator can do (lower requestsPerSecond) no better than the first.
    const message = 'the service asks for fewer requests (429); will retry: said once in ten minutes (lower requestsPerSecond if it lasts)';
    if (!this.throttleNews()) return void this.deps.log.debug?.(fields, message);
    this.deps.log.warn(fields, message);
  }

  /**
   * Whether a 429 of the service's is to be said at warn: once a spell (onceASpell), counting the
   * retries after one that serve's client says (one its retry gets answered reaches no step here).
   */
  throttleNews(): boolean {
    return this.throttleSaid();
  }

  /** Whether the round, `laterMs` from now, will have waited longer than `giveUpMs` (pendingGiveUpMs) since its first send. */
  private pendingPast(row: CheckRow, laterMs: number, giveUpMs = this.options.pendingGiveUpMs): boolean {
    return this.untilPendingGiveUp(row, giveUpMs) < laterMs;
  }

  /** How long until the round will have waited `giveUpMs` (pendingGiveUpMs) since its first send (negative once it has). */
  private untilPendingGiveUp(row: CheckRow, giveUpMs = this.options.pendingGiveUpMs): number {
    return Date.parse(row.submittedAt ?? row.updatedAt) + giveUpMs - this.deps.now().getTime();
  }

  private async pendingTooLong(row: CheckRow): Promise<void> {
    const moved = await this.toPerson(row, row.state, { state: 'needs-attention', dueAt: undefined, lastError: 'still pending at the service; check it there' });
    if (moved) this.emit('needs-attention', eventOf(row, { state: 'needs-attention', correlationId: row.correlationId, detail: 'pending too long' }));
  }

  /**
   * Retries used up. A check still being verified is answered in the chart as a check the service
   * never saw is (storeLocalFailure): the front desk reads there that its benefits could not be
   * verified, and why in short (`why`: the chart's words, no status text of the service's, no URL),
   * and the check waits for a person (the `failed` event names its kind). One past that (the record
   * of its write or its re-verification failing in this program) has nothing more to write: it is
   * dead, `summary` saying why to the operator.
   */
  private async giveUp(row: CheckRow, from: CheckState, attempts: number | undefined, summary: string, why: string): Promise<void> {
    if (VERIFYING.includes(from)) {
      // When, as the front desk reads its clock: the clinic's time where its zone is known.
      const timeZone = this.options.policy.timeZoneOf?.(row.check.clinicId);
      const at = timeZone === undefined ? minuteAt(this.deps.now()) : `${minuteAt(this.deps.now(), timeZone)} (${timeZone})`;
      const count = attempts === undefined ? '' : `, ${attempts} ${attempts === 1 ? 'attempt' : 'attempts'} in all`;
      return this.storeLocalFailure(row, NOT_VERIFIED, 'Benefits could not be verified', `${why}${count}; given up ${at}.`, from);
    }
    const dead = await this.step(row, from, { state: 'dead', dueAt: undefined, lastError: `gave up after ${attempts ?? 'its'} attempts: ${summary}` });
    if (dead) this.emit('failed', eventOf(row, { state: 'dead', detail: summary }));
  }

  /**
   * A verification body arrived (sync answer or poll) for a check in `row.state`. A result is
   * written to the chart in the same turn, under the lease this worker already holds, rather than
   * released and claimed again. `taken` is told when the body took the check on, not when it had
   * moved on meanwhile (cancelled, corrected, or its result brought by webhook).
   */
  private async outcomeArrived(row: CheckRow, outcome: VerificationOutcome, taken?: () => void): Promise<void> {
    const { change, event } = this.transitionFor(row, outcome);
    const moved = await this.kept(() => this.step(row, row.state, change));
    if (!moved) await this.tookCancelled(row, outcome.verification.correlationId, outcome);
    if (moved) taken?.();
    if (moved && event) this.emit(event.name, event.event);
    if (moved?.state === 'result-stored') await this.write(moved, outcome);
  }

  /**
   * Where a verification body takes a check: Pending is never final (wait for the webhook, then
   * poll); a retry-later failure is tried again as a new round (the service keeps a Failed
   * verification under its externalId); anything else is the result, stored to be written.
   * Pure, so the webhook applies it inside the transaction that records the delivery; `unheard`: the outcome is told
   * to the outage watch (portalHeard) after it, as a webhook's is once that transaction has committed.
   */
  transitionFor(row: CheckRow, outcome: VerificationOutcome, unheard = false): { change: Step; event?: { name: SyncEventName; event: SyncEvent } } {
    const correlationId = outcome.verification.correlationId;
    if (!hasResult(outcome.kind)) {
      // No later than when it will have been pending too long: Pending webhooks coming more often than the polls would put that off for good.
      // A millisecond past it, so that poll finds it pending past pendingGiveUpMs.
      const wait = Math.min(row.state === 'awaiting-result' ? this.pollWait(row) : this.options.pollAfterMs, Math.max(0, this.untilPendingGiveUp(row) + 1));
      return {
        change: {
          state: 'awaiting-result',
          correlationId,
          dueAt: this.later(wait),
          ...(outcome.kind === 'unknown' && { lastError: `status ${outcome.status.slice(0, 40)} is not one this plugin knows; waiting` }),
        },
      };
    }
    const portalOutSince = outcome.kind === 'failed' ? this.heldForPortal(row, outcome, unheard) : undefined;
    if (outcome.kind === 'failed' && outcome.failure.action === 'retry-later' && (row.attempts < this.options.maxAttempts || portalOutSince)) {
      const round = row.round + 1;
      const again: Step = { state: 'received', round, externalId: externalIdFor(row.key, row.fingerprint, round), correlationId: undefined, submittedAt: undefined };
      // Its portal found away (this answer the one that found it, or one more while it is): held as a 5xx of it is, its send given back.
      if (portalOutSince) return { change: this.held(row, row.portalId, { ...again, attempts: Math.max(0, row.attempts - 1) }, outcome.failure.kind, portalOutSince) };
      return { change: { ...again, dueAt: this.later(this.backoff(row.attempts)), lastError: `${outcome.failure.kind}: retrying later` } };
    }
    return {
      change: { state: 'result-stored', result: outcome.verification, resultAt: this.now(), correlationId, dueAt: this.now(), attempts: 0, lastError: undefined },
      event: resultEvent(row, outcome, 'result-stored'),
    };
  }

  /**
   * Since when the check's portal is out, when a failure saying it away (portalAway) finds it out, or it was, the
   * check's visit still to come: it is held, not retried (as a 5xx of it is, serviceFailed). `unheard`: the failure is
   * not counted yet (transitionFor), and the outage it will find is the one it is held for.
   */
  private heldForPortal(row: CheckRow, outcome: Extract<VerificationOutcome, { kind: 'failed' }>, unheard: boolean): Date | undefined {
    const portal = row.portalId;
    if (outcome.failure.portalAway !== true || portal === undefined || this.urgent(row)) return undefined;
    return unheard ? this.service.outOnceAway(portal, row.key) : this.service.outFor(portal);
  }

  /**
   * A check the service never saw (or refused) is still answered in the chart: a Failed outcome
   * of the plugin's own kind, with advice for the front desk, under a local correlation id. It has
   * no completedAt: no verification completed, and the chart would show that time as when one did.
   */
  private async storeLocalFailure(row: CheckRow, kind: string, title: string, detail: string, from: CheckState = row.state): Promise<void> {
    const verification = { correlationId: localCorrelationId(row.externalId), status: 'Failed', result: { type: `https://dental-elig.dev/problems/${kind}`, title, detail } };
    await this.outcomeArrived({ ...row, state: from }, toOutcome(verification));
  }

  // ------------------------------------------------------------------ waiting for results

  private async poll(row: CheckRow): Promise<void> {
    if (!row.correlationId) {
      await this.step(row, row.state, { state: 'received', dueAt: this.now() });
      return;
    }
    // A poll reads the service, not the payer's portal: it waits only for the whole service, and draws from its rate alone,
    // or a batch's polls would hold back the portal's sends (requestsPerSecondPerPortal spares the portal's logins).
    const pass = this.service.admit(this.urgent(row), undefined, row.key);
    if (pass === 'hold') return this.hold(row, undefined, 'awaiting-result', { state: 'awaiting-result' });
    try {
      await this.limiter.take(undefined);
      const outcome = await this.serviceCall(pass, row.key, undefined, 'get verification', () => this.deps.client.getVerification(row.correlationId as string, row.externalId));
      this.portalHeard('go', row, outcome);
      // Looked at once more when its time is up: a result whose webhook never came is taken, not left to a person as pending.
      if (!hasResult(outcome.kind) && this.pendingPast(row, 0)) {
        await this.pendingTooLong(row);
        return;
      }
      // A webhook missed only where one was to come: a check sent synchronously (its payer has no async portal) and answered Pending is polled for its result.
      // And only where the poll took the result: its webhook, come while the poll was under way, took it first.
      const missed = hasResult(outcome.kind) && this.options.asyncEnabled && row.mode === 'async';
      await this.outcomeArrived(row, outcome, missed ? () => this.deps.webhookMissed?.(row.key) : undefined);
    } catch (err) {
      await this.serviceFailed(row, 'awaiting-result', err);
    } finally {
      this.service.done(pass, row.key);
    }
  }

  // ------------------------------------------------------------------ the chart

  private write(row: CheckRow, outcome: VerificationOutcome = toOutcome(row.result)): Promise<void> {
    return this.inChartPlace(() => this.writeNow(row, outcome));
  }

  private async writeNow(row: CheckRow, outcome: VerificationOutcome): Promise<void> {
    // Read again once it has a place: a result may wait for one for as long as the chart is slow, its visit cancelled meanwhile.
    const current = await this.store.transaction((tx) => tx.getCheck(row.key));
    if (current?.withdrawnBecause !== undefined && current.state === 'result-stored' && current.round === row.round) return this.lookForWithdrawn(current, outcome);
    if (row.withdrawnBecause !== undefined) return this.lookForWithdrawn(row, outcome);
    let written;
    const replaces = failureOfRoundBefore(row, outcome);
    try {
      const writer = await this.deps.writer();
      // Read only when the write creates a Coverage beside others (endedCoverage): what the PMS says of the patient's plans now.
      const insuredUnder = async () => (await this.store.transaction((tx) => tx.getPatient(row.patientKey)))?.coverages.map((c) => c.subscriber.memberId);
      written = await this.timed('fhir', 'write eligibility', () => writer.write(row.check, outcome, {}, { reusedFrom: row.reusedFrom, insuredUnder, at: this.now(), replaces }));
      this.chartTook();
    } catch (err) {
      // The store failed under the write (its read of the patient's plans), not the chart.
      if (storeOutage(err)) throw err;
      const retryable = chartMayTakeIt(err);
      const detail = errorText(err);
      if (!retryable) {
        this.chartRefused(err);
        // Refused whole (a transaction): nothing of it is in the chart, and a visit that no longer needs it needs no person either.
        const refused: Step = { state: 'needs-attention', dueAt: undefined, lastError: `${CHART_REFUSED}: ${detail}` };
        if (await this.toPerson(row, 'result-stored', (current) => (current.withdrawnBecause !== undefined ? withdrawnUnwritten(current) : refused))) {
          this.emit('needs-attention', eventOf(row, { state: 'needs-attention', correlationId: row.correlationId, detail: CHART_REFUSED }));
          // The operator's to fix (a token expired, a permission, a profile the chart holds to), as a refusal of the service is: said at warn with what the chart answered.
          this.deps.log.warn({ key: row.key, status: err instanceof ChartWriteError ? err.status : undefined, err: detail }, 'chart write refused; needs attention (jobs retry once the chart takes it)');
        }
        return;
      }
      // The FHIR server is down or busy: the result waits in the store and is written when it returns.
      await this.step(row, 'result-stored', { state: 'result-stored', attempts: row.attempts + 1, dueAt: this.later(this.backoff(row.attempts)), lastError: `chart write failed: ${detail}` });
      // Why, as the service's failures say theirs: the chart down, busy or slow are met differently (ChartWriteError's words name no patient data).
      this.chartFailed({ key: row.key, attempts: row.attempts + 1, err: detail }, 'chart write failed; will retry');
      return;
    }
    // A retry-later failure reaches the chart only when its retries are used up: a person takes it from there.
    const needsPerson = outcome.kind === 'failed';
    const ids = { requestId: written.requestId, responseId: written.responseId, verification: outcome.verification.correlationId, round: row.round };
    // The same failure written again (its Coverage's order changed): the person was told of it when it was first written.
    const told = row.written?.verification === ids.verification && row.written.responseId === ids.responseId && replaces === undefined;
    const resultAt = new Date(row.resultAt ?? this.now());
    const again = needsPerson ? undefined : reverifyAt(row, resultAt, this.options.policy);
    const state: CheckState = needsPerson ? 'needs-attention' : 'written';
    // Its verification marks a pair the person was told of: until then, the write again after a swap below still tells them.
    const { verification: _untold, ...pair } = ids;
    // Written, the Coverage is active again: a later drop of its plan ends it again (endDroppedPlans).
    const done = await this.kept(() => this.step(row, 'result-stored', async (current, tx): Promise<Step> => withdrawnOnceWritten(current,
      // The result of a round given up came by webhook while its failure was written, or the Completed of the Partial being
      // written (takesALateResult): it is written next, after it.
      current.correlationId !== row.correlationId || resultKindOf(current) !== resultKindOf(row) ? { state: 'result-stored', written: ids, dueAt: this.now() }
      // An S14 or A08 that swapped the plans or corrected their dates meanwhile changed the stored check's
      // order or period (and no more, see scheduleAppointment): what was written is stale, so it is written again.
      : chartCoverageChanged(current.check, row.check) ? { state: 'result-stored', written: told ? ids : pair, dueAt: this.now() }
      // Dropped by the PMS while this was under way for a visit over: the Coverage this write made active is ended now.
      : (await planDroppedSince(tx, current)) ? { ...this.droppedSince(current), written: ids }
      : {
          state,
          written: ids,
          attempts: 0,
          dueAt: again,
          lastError: needsPerson ? adviceOf(outcome) : undefined,
          planDroppedAt: undefined,
          // The same failure written again, which a person had dismissed: nothing new for them to act on.
          ...(needsPerson && told && current.dismissedAt !== undefined && { keepsDismissal: true as const }),
        },
    )));
    // Written either way; a failure whose plan is gone, or whose visit no longer needs it, is left to no person.
    const withdrawn = done?.state === 'cancelled' && done.written?.responseId === ids.responseId;
    if (done?.state !== state && done?.state !== 'ending-coverage' && !withdrawn) return;
    this.emit('written', eventOf(row, { state: done.state, correlationId: row.correlationId, outcome: outcome.kind }));
    if (done.state === state && needsPerson && !told) this.emit('needs-attention', eventOf(row, { state, correlationId: row.correlationId, outcome: outcome.kind, failureKind: failureKindIn(outcome) }));
  }

  /**
   * A check withdrawn while its result was on its way to the chart (withdrawnBecause), taken by a
   * worker that was not writing it: a write of it may have reached the chart all the same (its
   * process killed before the store had it, or a write that failed once the chart had taken it).
   * Its pair is looked for, not written: a visit that no longer needs it gets nothing new, and a
   * pair the chart took is named on it (withdrawnOnceWritten). The chart out of reach, it is looked
   * for again as a write is tried again; refusing the search, it is withdrawn as written or not.
   */
  private async lookForWithdrawn(row: CheckRow, outcome: VerificationOutcome): Promise<void> {
    let found: { requestId: string; responseId: string } | undefined;
    try {
      const writer = await this.deps.writer();
      const find = writer.find?.bind(writer);
      if (find) {
        found = await this.timed('fhir', 'find eligibility', () => find(row.check, outcome));
        this.chartTook();
      }
    } catch (err) {
      const detail = errorText(err);
      if (chartMayTakeIt(err)) {
        await this.step(row, 'result-stored', { state: 'result-stored', attempts: row.attempts + 1, dueAt: this.later(this.backoff(row.attempts)), lastError: `${row.withdrawnBecause}; looking for its pair in the chart failed: ${detail}` });
        this.chartFailed({ key: row.key, attempts: row.attempts + 1, err: detail }, 'chart search failed; will retry');
        return;
      }
      this.chartRefused(err);
      this.deps.log.warn({ key: row.key, status: err instanceof ChartWriteError ? err.status : undefined, err: detail }, 'chart search refused; a withdrawn check is taken for one whose pair the chart does not hold');
    }
    const ids = found && { ...found, verification: outcome.verification.correlationId, round: row.round };
    const written: Step | undefined = ids && { state: outcome.kind === 'failed' ? 'needs-attention' : 'written', written: ids, attempts: 0, dueAt: undefined, lastError: undefined, planDroppedAt: undefined };
    const done = await this.kept(() => this.step(row, 'result-stored', (current) =>
      // Booked again meanwhile (its mark gone): written as any. Or a later result of it came (takesALateResult): looked for next.
      current.withdrawnBecause === undefined || current.correlationId !== row.correlationId || resultKindOf(current) !== resultKindOf(row) ? { state: 'result-stored', ...(ids && { written: ids }), dueAt: this.now() }
      : written ? withdrawnOnceWritten(current, written)
      : withdrawnUnwritten(current),
    ));
    if (ids && done?.written?.responseId === ids.responseId && done.state !== 'result-stored') {
      // Written by a worker that could not say so: said now, as a write found in the chart after a restart is.
      this.emit('written', eventOf(row, { state: done.state, correlationId: row.correlationId, outcome: outcome.kind }));
    }
  }

  /** Where a check whose Coverage is in the chart goes once its plan was dropped while it was under way for a visit over: to end it (endCoverage). */
  private droppedSince(row: CheckRow): Step {
    return { state: 'ending-coverage', attempts: 0, dueAt: this.now(), planDroppedAt: this.now(), lastError: whyEnding(row.check) };
  }

  /**
   * The check to a person with nothing written: one whose earlier round's pair is in the chart (a
   * re-verification refused, left pending, unreadable or its write refused) and whose plan the PMS
   * dropped while it was under way for a visit over ends that Coverage instead, as a write would:
   * endDroppedPlans could not take it under way, and no later message looks at a plan gone.
   * Whether it went to a person.
   */
  private async toPerson(row: CheckRow, from: CheckState, change: Step | ((current: CheckRow) => Step)): Promise<boolean> {
    const moved = await this.step(row, from, async (current, tx) =>
      current.written !== undefined && (await planDroppedSince(tx, current)) ? this.droppedSince(current) : typeof change === 'function' ? change(current) : change,
    );
    return moved?.state === 'needs-attention';
  }

  /**
   * A chart write that failed and will be retried: the first of a run at warn, the rest at debug
   * until the chart takes one, so a chart down for an hour is a line and its return another, not a
   * warning for each check at each retry (some 400 in 30 s for 69 checks on audit-pg3's road).
   */
  private chartFailed(fields: Record<string, unknown>, message: string): void {
    if (this.chartFailingSince) return this.deps.log.debug?.(fields, message);
    this.chartFailingSince = this.deps.now();
    this.deps.log.warn({ ...fields, further: 'at debug until the chart takes a write' }, message);
  }

  /** A refusal of the chart's, kept while it is of this plugin's credentials (chartRefusing). */
  private chartRefused(err: unknown): void {
    const status = err instanceof ChartWriteError ? err.status : undefined;
    if (status === 401 || status === 403) this.chartRefusing ??= { status, since: this.deps.now() };
  }

  private chartTook(): void {
    this.chartRefusing = undefined;
    if (!this.chartFailingSince) return;
    this.deps.log.info({ since: this.chartFailingSince.toISOString() }, 'the chart takes writes again');
    this.chartFailingSince = undefined;
  }

  /**
   * The check's plan no longer serves its visit (dropped, or ended before it): its Coverage in the
   * chart is ended, then the check is cancelled; one written for a visit that is over and was not
   * cancelled (a plan dropped after it) stays written, its verification having served that visit. One whose written
   * result is a failure (given up, refused by the payer) served it with nothing: the plan gone and
   * the visit over, it is left neither to a person nor to a retry of the checks given up.
   */
  private async endCoverage(row: CheckRow): Promise<void> {
    // Done, unless the PMS spoke again meanwhile (a plan being dated dropped since: endDroppedPlans): its last word is carried out next.
    const done = (change: Omit<Step, 'state'>) => async (current: CheckRow, tx: StoreTx): Promise<Step> =>
      current.planDroppedAt !== row.planDroppedAt ? { state: 'ending-coverage', attempts: 0, dueAt: this.now() }
      : { ...change, state: (await this.servedItsVisit(current, tx)) ? 'written' : 'cancelled' };
    let ended: boolean | undefined;
    try {
      const writer = await this.deps.writer();
      const end = writer.endCoverage?.bind(writer);
      if (end) ended = await this.timed('fhir', 'end coverage', () => end(row.check, row.planDroppedAt ?? row.updatedAt));
      // Only a Coverage ended reached the chart: a FHIR-sourced check's, or a writer that ends none, sends nothing, the chart down or not.
      if (ended) this.chartTook();
    } catch (err) {
      const retryable = chartMayTakeIt(err);
      const detail = errorText(err);
      if (retryable) {
        // As a write: the chart down or busy, the Coverage is ended when it is back.
        await this.step(row, 'ending-coverage', { state: 'ending-coverage', attempts: row.attempts + 1, dueAt: this.later(this.backoff(row.attempts)), lastError: `ending its Coverage failed: ${detail}` });
        this.chartFailed({ key: row.key, attempts: row.attempts + 1, err: detail }, 'ending a Coverage in the chart failed; will retry');
        return;
      }
      this.chartRefused(err);
      await this.kept(() => this.step(row, 'ending-coverage', done({ dueAt: undefined, lastError: `its plan no longer serves the visit; the chart refused ending its Coverage: ${detail}` })));
      this.deps.log.warn({ key: row.key }, 'the chart refused ending a Coverage; it stays as it is');
      return;
    }
    const dropped = planHoldsVisit(row.check);
    const what =
      ended === undefined ? 'this writer does not end Coverages'
      : !ended ? `no active Coverage of it in the chart to ${dropped ? 'end' : 'date'}`
      : dropped ? 'its Coverage ended in the chart'
      : 'its Coverage given them in the chart';
    // Kept as a write's record is: claimed again, the Coverage would be ended again, and said to have had none active.
    await this.kept(() => this.step(row, 'ending-coverage', done({ attempts: 0, dueAt: undefined, lastError: `${whyEnding(row.check)}: ${what}` })));
  }

  /**
   * Whether the check's written result served its visit: the visit over and not cancelled (a
   * cancelled or moved one, its re-verification withdrawn midway say, was served by nothing), and
   * what was written no failure. Its appointment may hold it no longer and still have taken place:
   * sent again after the visit without its plan (an S14 at checkout).
   */
  private async servedItsVisit(row: CheckRow, tx: StoreTx): Promise<boolean> {
    const { clinicId, dateOfService } = row.check;
    if (row.written === undefined || resultKindOf(row) === 'failed') return false;
    if (dateOfService >= firstDateToCome(this.deps.now(), this.options.policy.timeZoneOf?.(clinicId))) return false;
    if ((await tx.appointmentsHolding(row.key)).length > 0) return true;
    const visits = await tx.appointmentsOfPatient(row.patientKey);
    return visits.some((visit) => visit.dateOfService === dateOfService && visit.status !== 'cancelled' && clinicOf(visit) === clinicId);
  }

  private async reverify(row: CheckRow): Promise<void> {
    const round = row.round + 1;
    const { policy } = this.options;
    await this.step(row, 'written', async (current, tx) => ({
      state: 'received',
      round,
      externalId: externalIdFor(row.key, row.fingerprint, round),
      correlationId: undefined,
      submittedAt: undefined,
      reusedFrom: undefined,
      attempts: 0,
      dueAt: this.now(),
      lastError: `verifying again before the visit: ${staleness(row, policy)}`,
      // Another visit of the coverage verified again since (its re-verification a day or two before) serves this one,
      // if its result is still fresh at this visit: one it would take to be verified again before it does not.
      ...(await freshResultFor(tx, current, { now: this.deps.now(), policy }, (fresh) => fresh.key !== row.key && freshAtVisit(current, fresh, policy))),
    }));
  }

  // ------------------------------------------------------------------ helpers

  /**
   * Moves the check from `from` to the step's state, if it is still in `from` at the same round.
   * Returns the check as stored, or undefined when it had moved on (cancelled, corrected).
   */
  private async step(row: CheckRow, from: CheckState, change: Step | ((current: CheckRow, tx: StoreTx) => Step | Promise<Step>)): Promise<CheckRow | undefined> {
    const now = this.deps.now();
    return this.store.transaction(async (tx) => {
      const current = await tx.getCheck(row.key);
      if (!current || current.state !== from || current.round !== row.round) return undefined;
      const next = applyStep(current, typeof change === 'function' ? await change(current, tx) : change, now);
      await tx.putCheck(next);
      return next;
    });
  }

  /**
   * Records what the service or the chart answered. The store out of reach, the answer is kept in
   * hand, and the check's lease with it, until the store takes it: left to be claimed again, the
   * check would be sent to the service (or written to the chart) a second time. Given up, as any
   * step the store failed, only when the worker stops meanwhile.
   */
  private async kept<T>(record: () => Promise<T>): Promise<T> {
    for (let tries = 1; ; tries++) {
      try {
        return await record();
      } catch (err) {
        if (!storeOutage(err) || !this.running) throw err;
        await this.outageWait(tries + 1);
      }
    }
  }

  /**
   * A check whose call would go to a service found out waits for it: looked at again after the
   * next call that tries the service, its attempts as they were. `failure`: the one that found it out.
   * One still to be sent has its round's wait at the service (pendingGiveUpMs) start again at its
   * next send, one whose send's answer was lost at its hold: held longer than that, it would be given
   * to a person at its first Pending answer.
   */
  private async hold(row: CheckRow, portal: string | undefined, from: CheckState, change: Step, failure?: string): Promise<void> {
    await this.step(row, from, this.held(row, portal, change, failure));
  }

  /** The step of a check held for an outage (hold), from `change`; `since`: when it began, one its failure is still to find (heldForPortal) a portal's. */
  private held(row: CheckRow, portal: string | undefined, change: Step, failure?: string, since = this.service.outFor(portal)): Step {
    // An outage its failure is still to find holds it for no time yet: due at once, it is held by its next call's pass.
    const wait = this.service.holdFor((this.deps.random ?? Math.random)(), portal, row.key);
    const what = this.service.portalOut(portal) || !this.service.covers(portal) ? ` for payer portal ${portal}` : '';
    const why = `the verification service has not answered${what} since ${since && minuteAt(since)}; waiting for it, the wait using no attempt`;
    // Unsent, its round begins again when the service is back. One sent before whose answer was lost keeps a send (a
    // cancellation has it asked again under its externalId), dated at its hold: counted from its first, an outage longer than
    // pendingGiveUpMs gave it to a person at its first Pending answer, as the hold of an unsent one must not either.
    const sent = change.state === 'received' ? { submittedAt: undefined } : change.state === 'submitted' && { submittedAt: this.now() };
    return { ...change, ...sent, dueAt: this.later(wait), lastError: failure ? `${failure}; ${why}` : why };
  }

  /**
   * The checks given up as not verified while the service was away (their visits' days had come,
   * so they were not held) are sent again once it answers, those whose visits are still to come:
   * the front desk was told in time, and the chart now gets the result after that error response.
   * One whose error response the chart has not taken yet (it was away too) is sent again as well:
   * its result is written in its stead.
   */
  private sendAgainGivenUp(found: Date, portal: string | undefined): Promise<void> {
    // One portal's outage: the checks of others given up meanwhile failed for their own reasons. One
    // whose portal is still out would only fail again, and be written into the chart as not verified again.
    const givenUp = (row: CheckRow) => givenUpHere(row, portal) && (portal === undefined || row.portalId === portal) && !this.service.covers(row.portalId);
    return this.sendAgain(givenUp, async () => {
      // The earliest any worker found it. On PostgreSQL this worker's keeping of it, still under way
      // (an answer right after it was found), would commit after it was forgotten.
      await this.outageKept;
      const kept = await forgetOutageStart(this.store, portal);
      return kept && kept < found ? kept : found;
    }, 'while the service was away');
  }

  /** A check whose visit's day had come given up at `at` for a 429: told to the outage watch, and kept in the store (keepThrottledSince). */
  private gaveUpThrottled(at: Date): void {
    this.service.gaveUpThrottled(at);
    // The first of a throttling's give-ups is kept: the later ones, a morning's batch of them, would each write it again to keep nothing.
    if (this.throttledKept) return;
    this.throttledKept = true;
    this.outageKept = this.outageKept.then(async () => {
      try {
        await keepThrottledSince(this.store, at);
      } catch (err) {
        // Kept by the next give-up instead.
        this.throttledKept = false;
        if (!storeOutage(err)) this.deps.log.warn({ err: errorText(err) }, 'could not keep when checks were given up while the service asked for fewer requests');
      }
    });
  }

  /**
   * A verification's send answered other than 429: the checks given up in a throttling are sent again, this worker's
   * (throttleOver) or one another instance kept in the store, which this one reads at most every PORTALS_READ_TICKS
   * ticks of such answers: an instance that gave them up and stopped for good would leave them to a person.
   */
  private verificationTaken(): void {
    const since = this.service.throttleOver();
    this.throttleProbe = undefined;
    const now = this.deps.now().getTime();
    if (since === undefined && !this.portalsReadDue(this.throttleReadAt, now)) return;
    this.throttleReadAt = now;
    this.sendingAgain = this.sendingAgain.then(() => this.sendAgainThrottled(since));
  }

  /**
   * The checks given up while the service asked for fewer requests sent again, from the earliest any worker gave one up,
   * by the worker whose transaction forgets the store's record (once across instances), or by this one, `since` its own
   * first, when keeping it failed. None given up for another reason: they were sent again then, or are a person's.
   */
  private sendAgainThrottled(since: Date | undefined): Promise<void> {
    return this.sendAgain(this.throttledToSend, async () => {
      await this.outageKept;
      this.throttledKept = false;
      const kept = await forgetThrottled(this.store).catch((err: unknown) => {
        // Read on the chance another instance kept one, with none here: the store away, the next send taken reads it again, nothing said.
        if (since !== undefined || !storeOutage(err)) throw err;
        this.throttleReadAt = Number.NEGATIVE_INFINITY;
        return undefined;
      });
      // Gone, though this worker kept it: another instance took it up and sent again those given up by then, not those
      // given up here since (a rate limit that lets some sends through), which this one still has to send.
      if (kept === undefined) return since;
      return since && since < kept ? since : kept;
    }, 'while the service asked for fewer requests');
  }

  /**
   * The try of a service that throttles verifications: one check given up in the throttling sent again (the earliest), the
   * others once its send is answered other than 429 (verificationTaken). A read answered says nothing of them: a rate limit
   * is often an endpoint's, and all of them sent at each read answered were given up again, a burst every throttledGiveUpMs.
   * None while the one sent is still being verified; none once another instance took the record up.
   */
  private async tryThrottled(since: Date): Promise<void> {
    try {
      const probe = this.throttleProbe;
      if (probe) {
        const row = await this.store.transaction((tx) => tx.getCheck(probe.key));
        if (row?.round === probe.round && VERIFYING.includes(row.state)) return;
        this.throttleProbe = undefined;
      }
      await this.outageKept;
      const kept = (await keptOutages(this.store)).throttled;
      const from = kept && kept < since ? kept : since;
      const now = this.deps.now();
      const first = (await givenUpSince(this.store, from, now, this.options.policy, this.throttledToSend)).at(-1);
      // None left to send (sent again by a person or another instance, or their visits cancelled): nothing waits for the service's answer.
      if (!first) return this.throttleEnded();
      if (kept === undefined && this.throttledKept) {
        // Taken up by another instance's answered send, which sent again those given up by then: those given up here
        // since are kept again, for any instance to send should this one stop.
        this.throttledKept = false;
        this.gaveUpThrottled(since);
      }
      if (!(await retryAsRead(this.store, first, now))) return;
      this.throttleProbe = { key: first.key, round: first.round + 1 };
      this.deps.log.info({ key: first.key }, 'one check given up while the service asked for fewer requests is sent again; the others once the service takes it');
      this.kick();
    } catch (err) {
      if (!storeOutage(err)) this.deps.log.warn({ err: errorText(err) }, 'could not send a check given up while the service asked for fewer requests again');
    }
  }

  /** A check given up in a throttling, to send again: none of a portal found out, which would only fail again. */
  private readonly throttledToSend = (row: CheckRow): boolean => givenUpThrottled(row) && !this.service.covers(row.portalId);

  /** The throttling over here with nothing to send: a throttling after it is kept again. */
  private throttleEnded(): void {
    this.service.throttleOver();
    this.throttledKept = false;
  }

  /**
   * The checks given up as not verified since `from` (undefined: none to send) that `givenUp` takes, whose visits are
   * still to come, sent again: those given up during an outage (sendAgainGivenUp), or a throttling their visits' day (sendAgainThrottled).
   */
  private async sendAgain(givenUp: (row: CheckRow) => boolean, from: () => Promise<Date | undefined>, during: string): Promise<void> {
    try {
      const now = this.deps.now();
      const since = await from();
      if (since === undefined) return;
      let sent = 0;
      for (const row of await givenUpSince(this.store, since, now, this.options.policy, givenUp)) if (await retryAsRead(this.store, row, now)) sent++;
      if (sent > 0) this.deps.log.info({ checks: sent }, `checks given up ${during} are sent again`);
      this.kick();
    } catch (err) {
      this.deps.log.warn({ err: errorText(err) }, `the checks given up ${during} could not be sent again; jobs retry sends them`);
    }
  }

  /** Keeps when the service or a portal was found out (outage-record), so a worker started meanwhile takes the outage up. */
  private async keepOutage(since: Date, portal: string | undefined): Promise<void> {
    try {
      await keepOutageStart(this.store, since, portal);
      if (portal !== undefined) this.service.kept(portal, since);
    } catch (err) {
      if (!storeOutage(err)) this.deps.log.warn({ err: errorText(err) }, 'could not keep when the verification service was found out');
    }
  }

  /**
   * The outage a worker before this one found, taken up; the store out of reach, this worker's calls find it.
   * Again at start() (taken up once: a second changes nothing), so a sync says it while its start waits out the catalog's retries.
   */
  async takeUpOutage(): Promise<void> {
    try {
      const kept = await keptOutages(this.store);
      if (kept.service) this.service.resume(kept.service);
      // Its checks sent again once a call is answered: the worker tries the service itself meanwhile.
      if (kept.throttled) {
        this.service.gaveUpThrottled(kept.throttled);
        // The store holds it: gone from there, another instance took it up (tryThrottled).
        this.throttledKept = true;
      }
      for (const { portal, since } of kept.portals) this.service.resume(since, portal);
    } catch (err) {
      if (!storeOutage(err)) this.deps.log.warn({ err: errorText(err) }, 'could not read whether the verification service was found out before this start');
    }
  }

  /**
   * The portals out here that another instance sharing the store found answering, read from the
   * store at most every PORTALS_READ_TICKS ticks while one is out: a portal out on its own ends only
   * by an answer to one of its checks, and the next of them this worker sends may be hours away,
   * /healthz and dental_elig_payer_portals_out saying it out meanwhile.
   */
  private async portalsBackElsewhere(): Promise<void> {
    const out = this.service.portalsOut;
    const now = this.deps.now().getTime();
    if (out.length === 0 || !this.portalsReadDue(this.portalsReadAt, now)) return;
    this.portalsReadAt = now;
    try {
      const kept = new Set((await keptOutages(this.store)).portals.map((p) => p.portal));
      for (const { portal } of out) if (!kept.has(portal)) this.service.endedElsewhere(portal, PORTALS_READ_TICKS * this.options.idleMs);
    } catch (err) {
      if (!storeOutage(err)) this.deps.log.warn({ err: errorText(err) }, 'could not read whether another instance found a payer portal answering again');
    }
  }

  /**
   * The whole service out with no check left to try it: the worker tries it with a read of the
   * payer network. Any answer, whatever it says, is the service there (its end sends again the
   * checks given up meanwhile); a failure puts the next try off, as a check's does.
   */
  private tryItself(): void {
    if (!this.running) return;
    const throttledSince = this.service.throttledTry();
    if (throttledSince) this.tryingItself = this.tryingItself.then(() => this.tryThrottled(throttledSince));
    if (!this.service.tryItself(NO_CHECK)) return;
    const over = () => this.service.done('probe', NO_CHECK);
    this.tryingItself = this.serviceCall('probe', NO_CHECK, undefined, 'list payer network', () => this.deps.client.listPayers({ limit: 1 })).then(over, over);
  }

  /**
   * A verification's answer told to the outage watch as its portal's: a failure of a kind that says the
   * portal itself is away (portalAway) counts as the portal failing, as a 5xx does, by the send's answer
   * (`sync`), a poll or a webhook (`pass` 'go'); any other answer is the portal answering. Pending by a
   * poll or a webhook is the service's word, not the portal's, as a request taken is (accepted). A result polled or
   * delivered is the portal's answer when it was produced (producedAt), which may be before its portal went.
   */
  portalHeard(pass: Pass, row: Pick<CheckRow, 'key' | 'portalId' | 'submittedAt'>, outcome: VerificationOutcome, sync = false): void {
    const { key, portalId: portal } = row;
    // The send's own answer is the service answering a call (a poll's call was told so already); a webhook is not: the
    // service delivers results while its API fails every call, and the whole service's outage stays until a call is answered.
    if (sync) this.service.answered(undefined, key);
    if (outcome.kind === 'failed' && outcome.failure.portalAway && portal !== undefined) return this.service.portalAway(pass, key, portal, outcome.failure.kind);
    if (!sync && !hasResult(outcome.kind)) return;
    const at = sync ? undefined : producedAt(row, outcome);
    if (!sync && portal !== undefined && !this.service.portalOut(portal)) this.backForOthers(portal, at);
    this.service.portalAnswered(portal, key, at);
  }

  /** Whether PORTALS_READ_TICKS ticks have passed since the store was read at `lastAt` for portals out elsewhere (measured either way, so a clock stepped back does not hold the next read off). */
  private portalsReadDue(lastAt: number | undefined, now: number): boolean {
    return lastAt === undefined || Math.abs(now - lastAt) >= PORTALS_READ_TICKS * this.options.idleMs;
  }

  /**
   * A result of `portal` by webhook or poll, which this worker does not find out: the answer, maybe, to
   * another instance's try of it (a request it sent, taken with a 202, whose webhook came here). That
   * instance hears no answer of its own then, and would hold the portal's checks a try a minute for as long as
   * results reach this one: the outage it kept in the store is forgotten here, as the instance finding a
   * portal back does (sendAgainGivenUp), and it ends there at its next read (portalsBackElsewhere). The
   * store is read at most every PORTALS_READ_TICKS ticks a portal.
   */
  private backForOthers(portal: string, producedAt: number | undefined): void {
    const now = this.deps.now().getTime();
    if (!this.portalsReadDue(this.portalsHeardAt.get(portal), now)) return;
    this.portalsHeardAt.set(portal, now);
    this.sendingAgain = this.sendingAgain.then(async () => {
      try {
        const kept = (await keptOutages(this.store)).portals.find((p) => p.portal === portal);
        // Found out here meanwhile: an answer of its own ends it. A result produced before it was found says nothing of it.
        if (!kept || this.service.portalOut(portal) || (producedAt !== undefined && producedAt < kept.since.getTime())) return;
        this.deps.log.info({ portalId: portal }, 'the verification service answers again for a payer portal another instance found out; its checks held there go on');
        await this.sendAgainGivenUp(kept.since, portal);
      } catch (err) {
        if (!storeOutage(err)) this.deps.log.warn({ err: errorText(err) }, 'could not read whether another instance found a payer portal out');
      }
    });
  }

  /** A check whose visit's day has come is not held for the service: it uses its attempts, so the front desk is told in time (giveUp). */
  private urgent(row: CheckRow): boolean {
    return visitDayCome(row.check, this.deps.now(), this.options.policy);
  }

  /** Whether the check's visit's day is over where its clinic is (anywhere, its zone unknown): nothing verified now serves it. */
  private visitOver(row: CheckRow): boolean {
    return row.check.dateOfService < firstDateToCome(this.deps.now(), this.options.policy.timeZoneOf?.(row.check.clinicId));
  }

  /** A call to the service for the check `key`, its answer (`heard`, by default the service and `portal` answering) or failure told to the outage watch. */
  private async serviceCall<T>(pass: Pass, key: string, portal: string | undefined, operation: string, call: () => Promise<T>, heard = (_answer: T) => this.service.answered(portal, key)): Promise<T> {
    try {
      const answer = await this.timed('service', operation, call);
      heard(answer);
      this.keyRefusedSince = undefined;
      return answer;
    } catch (err) {
      this.service.failed(err, pass, key, portal);
      // Any refusal but the key's (a 403 of one clinic's, a 422 of the data) says the key was taken; the key's, by any call,
      // that it is refused (a cancelled check's poll too, whose check goes to no person).
      if (err instanceof ServiceError && err.status === 401) this.keyRefusedSince ??= this.deps.now();
      else if (err instanceof ServiceError && keyTaken(err)) this.keyRefusedSince = undefined;
      throw err;
    }
  }

  /**
   * Holds a check whose step the store failed before it is given back: claims may answer while
   * transactions fail (SQLite's file held or its disk full, a query on PostgreSQL timing out), and a check
   * claimed again at once would call the service or the chart in a loop until the store took its
   * step. From idleMs, longer at each such step in a row, up to ANSWER_RETRY_MAX_MS; none once stopping.
   */
  private async outagePause(): Promise<void> {
    if (!this.running) return;
    await this.outageWait(++this.stepOutages);
  }

  /** The n-th wait in a row for a store out of reach: idleMs, doubling, up to ANSWER_RETRY_MAX_MS, or until stop(). */
  private async outageWait(n: number): Promise<void> {
    const ms = Math.min(this.options.idleMs * 2 ** (n - 1), ANSWER_RETRY_MAX_MS);
    await sleep(ms, undefined, { signal: this.stopping.signal }).catch(() => undefined);
  }

  private backoff(attempts: number): number {
    return this.jitter(Math.min(this.options.backoff.maxMs, this.options.backoff.baseMs * 2 ** Math.max(0, attempts - 1)));
  }

  /**
   * The wait before polling a verification again: about as long as it has been pending since the
   * round's first send (from pollAfterMs up to backoff.maxMs), so polls thin out as it stays
   * Pending, with nothing to count in the store.
   */
  private pollWait(row: CheckRow): number {
    const pending = this.deps.now().getTime() - Date.parse(row.submittedAt ?? row.updatedAt);
    return this.jitter(Math.max(this.options.pollAfterMs, Math.min(this.options.backoff.maxMs, pending)));
  }

  /** Full jitter on half the delay: retries of many checks do not arrive together. */
  private jitter(ms: number): number {
    return Math.round(ms / 2 + (this.deps.random ?? Math.random)() * (ms / 2));
  }

  private now(): string {
    return this.deps.now().toISOString();
  }

  private later(ms: number): string {
    return new Date(this.deps.now().getTime() + ms).toISOString();
  }

  private async timed<T>(what: 'service' | 'fhir', operation: string, call: () => Promise<T>): Promise<T> {
    const started = process.hrtime.bigint();
    let ok = false;
    try {
      const result = await call();
      ok = true;
      return result;
    } finally {
      this.deps.observe?.(what, operation, Number(process.hrtime.bigint() - started) / 1e9, ok);
    }
  }
}

/**
 * Whether a send failed with no answer of the service's after it may have reached it (a timeout, a
 * connection dropped mid-request, a gateway's 502 or 504 for a service behind it): what it did there is unknown.
 */
function answerLost(err: ServiceError): boolean {
  return err.status === undefined ? !err.notSent : err.status === 502 || err.status === 504;
}

/** A check's request as built to send (requestOf), and the mode and portal it goes by. */
type Request = { body: VerificationRequest; mode: 'sync' | 'async'; portalId: string };

/** Whether an accepted verification is answered as done already (a send repeated under its externalId): its result is polled at once. */
function resultReady(accepted: { status?: unknown }): boolean {
  return typeof accepted.status === 'string' && hasResult(outcomeKindOf(accepted.status));
}

/**
 * What a check cancelled with its request at the service (its visit moved, say) keeps of the
 * service's answer: the correlation id, by which the webhook finds it, and the result, which another
 * visit of the plan may take (freshResultFor) rather than be verified a second time. It stays
 * cancelled, and nothing is written to the chart. Undefined: nothing to keep (another check's,
 * another request's, no result yet where the id is known, or its round's result it has: a
 * re-verification's keeps the last round's until then).
 */
export function cancelledTakes(row: CheckRow, correlationId: string, at: string, outcome?: VerificationOutcome): Step | undefined {
  if (row.state !== 'cancelled' || row.submittedAt === undefined || answeredThisRound(row)) return undefined;
  if (row.correlationId !== undefined && row.correlationId !== correlationId) return undefined;
  if (outcome === undefined || !hasResult(outcome.kind)) return row.correlationId === undefined ? { state: 'cancelled', correlationId } : undefined;
  // Followed no longer (followCancelled): it has what it was followed for.
  return { state: 'cancelled', correlationId, result: outcome.verification, resultAt: at, dueAt: undefined };
}

/**
 * What a check withdrawn while its pair was on its way to the chart (withdrawnBecause) comes to once
 * the chart has taken that pair (`step`, the write's): what the withdrawal makes of a check written
 * before it (withdrawIfUnheld), its pair named, so that a plan the PMS drops later ends its Coverage
 * through it (restsInChart). A result rests written, no visit left to verify it again for; a
 * failure is withdrawn, left to no person. A Coverage to end is ended; a result still to write (a
 * later one came) stays withdrawn, to be looked for in its turn.
 */
function withdrawnOnceWritten(current: CheckRow, step: Step): Step {
  const why = current.withdrawnBecause;
  if (why === undefined || step.state === 'result-stored') return step;
  if (step.state === 'written') return { ...step, dueAt: undefined, withdrawnBecause: undefined };
  if (step.state !== 'needs-attention') return { ...step, withdrawnBecause: undefined };
  const { keepsDismissal: _told, ...failure } = step;
  return { ...failure, state: 'cancelled', dueAt: undefined, lastError: why, withdrawnBecause: undefined };
}

/** The same, its pair not in the chart (refused, or looked for and not found): withdrawn as a result not yet written is. */
function withdrawnUnwritten(current: CheckRow): Step {
  return { state: 'cancelled', dueAt: undefined, lastError: current.withdrawnBecause, withdrawnBecause: undefined };
}

/** The check after a step; a field the step sets to undefined is removed. */
export function applyStep(current: CheckRow, change: Step, now: Date): CheckRow {
  const { keepsDismissal, ...fields } = change;
  const updatedAt = now.toISOString();
  const next = { ...current, ...fields, updatedAt, ...(keepsDismissal && { dismissedAt: updatedAt }) } as Record<string, unknown>;
  for (const k of Object.keys(next)) if (next[k] === undefined) delete next[k];
  return next as CheckRow;
}

/** Why a written check's result no longer serves its visit (reverifyAt): its benefit period over by then, or its age. */
function staleness(row: CheckRow, policy: SchedulePolicy): string {
  const next = nextPeriodBegins(row.result, row.check.dateOfService);
  // Its date at UTC tells it from a result verified since that day (a portal still answering last year's), in words only.
  return next !== undefined && (row.resultAt ?? '') < next ? `the last result is of the benefit period before ${next}, the visit's` : `the last result is older than ${Math.round(policy.freshnessMs / 86_400_000)} days`;
}

/** Whether another check's result is still fresh on this check's visit: one that is not would have it verified again before it. */
function freshAtVisit(row: CheckRow, fresh: CheckRow, policy: SchedulePolicy): boolean {
  return reverifyAt({ ...row, result: fresh.result }, new Date(fresh.resultAt ?? 0), policy) === undefined;
}

/**
 * The pair the chart holds for an earlier round's failure of this plugin's, which a failure of this
 * plugin's for this round takes the place of (WriteOptions.replaces): nothing was written for the
 * check between them. A check given up, sent again once the service answered (a read, while its
 * verifications still failed), and given up again would otherwise add a response saying so each time.
 */
function failureOfRoundBefore(row: CheckRow, outcome: VerificationOutcome): WrittenIds | undefined {
  const before = row.written;
  if (!before?.verification?.startsWith(LOCAL) || outcome.verification.correlationId !== localCorrelationId(row.externalId)) return undefined;
  // Under the same id, an earlier round's (sent again under its externalId, externalIdAgain), or this round's written again.
  return before.verification !== outcome.verification.correlationId || (before.round !== undefined && before.round !== row.round) ? before : undefined;
}

/**
 * Whether a check's result is this plugin's not-verified failure of its round (giveUp), not an answer of the service's,
 * or, once `portal`'s outage ends, the service's saying that portal away (portalAway), its retries used up (its visit's
 * day come): each waited for the service or the portal to answer, and is sent again once it does.
 */
function givenUpHere(row: CheckRow, portal: string | undefined): boolean {
  if (resultKindOf(row) !== 'failed') return false;
  const outcome = storedOutcome(row.result);
  if (outcome?.kind !== 'failed') return false;
  const { failure } = outcome;
  if (failure.portalAway) return portal !== undefined && row.portalId === portal;
  return givenUpUnverified(row);
}

/** Whether a check's result is this plugin's not-verified failure of its round given up throttled on its visit's day: not one given up for another reason. */
function givenUpThrottled(row: CheckRow): boolean {
  if (!givenUpHere(row, undefined)) return false;
  const outcome = storedOutcome(row.result);
  return outcome?.kind === 'failed' && (outcome.problem.detail?.startsWith(THROTTLED_TODAY) ?? false);
}

/**
 * When a verification's result polled or delivered was produced, as far as this plugin can know: its own time
 * (completedAt) where the service gives one, and no earlier than the round's first send; undefined when neither is known.
 */
function producedAt(row: Pick<CheckRow, 'submittedAt'>, outcome: VerificationOutcome): number | undefined {
  const times = [outcome.verification.completedAt, row.submittedAt].map((at) => Date.parse(at ?? '')).filter((at) => !Number.isNaN(at));
  return times.length === 0 ? undefined : Math.max(...times);
}

/** Data the chart refuses is not sent again as it is; anything else (down, busy, timing out) is. */
function chartMayTakeIt(err: unknown): boolean {
  return err instanceof ChartWriteError ? err.retryable : !(err instanceof FhirInputError);
}

/**
 * Whether the service refused the request for its fields: a 422, as the interface answers a request
 * failing validation, or another 4xx naming them in errors[] (a 400, which earlier versions of
 * the interface answered on other endpoints). Left to the operator as a 401, 403 or 404 is, the front desk never heard: nothing was
 * written to the chart, and sent again as it is, it is refused again.
 */
function refusedForFields(err: ServiceError): boolean {
  const { status } = err;
  if (status === 422) return true;
  const named = (err.problem.errors ?? []).length > 0;
  return named && status !== undefined && status >= 400 && status < 500 && status !== 401 && status !== 403 && status !== 404 && !err.mayPassLater;
}

/**
 * Whether a refusal shows the API key taken: a 4xx of the request's own, not 401's refusal nor one
 * that may pass later (408, 425, 429), which a proxy or the service's gateway answers before the key is read.
 */
function keyTaken(err: ServiceError): boolean {
  const { status } = err;
  return status !== undefined && status >= 400 && status < 500 && status !== 401 && !err.mayPassLater;
}

function adviceOf(outcome: VerificationOutcome): string {
  if (outcome.kind !== 'failed') return outcome.kind;
  // The front desk's advice is in the chart; the operator reading jobs list wants why and when.
  if (outcome.failure.kind === NOT_VERIFIED && outcome.problem.detail) return `${NOT_VERIFIED}: ${outcome.problem.detail}`;
  // The fields the service refused, which the advice says are named ('portalId: no credentials are stored for this
  // clinic and portal' is the office's setup, not the PMS's data): the chart's disposition names them, jobs list too.
  if ((outcome.failure.kind === REQUEST_REFUSED || outcome.failure.kind === SETUP_REFUSED) && outcome.problem.detail) return `${outcome.failure.kind}: ${withoutQuotes(outcome.problem.detail)}`;
  // A kind the table does not list is told by the service's own title: its advice is the same for every such kind.
  const { failure, problem } = outcome;
  const said = failure.action === 'unknown' ? (problem.title || failure.advice) : (failure.advice ?? problem.title);
  const advice = `${failure.kind}: ${said ?? 'needs a person'}`;
  return outcome.failure.action === 'retry-later' ? `${advice} (retries used up)` : advice;
}

