import type { VerificationClient } from '../verification/client';
import { ServiceError } from '../verification/errors';
import { PayerCatalog } from '../verification/payer-catalog';
import { errorText } from '../sync/error-text';
import type { Logger } from './logger';

/**
 * A refresh asks for the whole network at least this often, not only what changed: only a whole
 * listing tells that a payer left the network, and what changed is asked for since this machine's
 * clock, which may run ahead of the service's.
 */
const WHOLE_EVERY_MS = 24 * 3600_000;

/** A payer the catalog does not know brings it up to date at most this often: a PMS sending a payer no network lists would otherwise ask at every check. */
export const CATALOG_ASK_AGAIN_MS = 5 * 60_000;

export interface CatalogKeeperOptions {
  client: VerificationClient;
  /** Where the catalog is saved (serve's data dir), read at start when the service does not answer. */
  file: string;
  logger: Logger;
  /** The sync's clock: how long ago the catalog was last asked for. */
  now: () => Date;
  /** How often the catalog is brought up to date while running; 0: at start, and for a payer it does not know, only. */
  refreshMs: number;
}

/**
 * The payer catalog of a running sync, kept up to date from the service: the network changes while
 * serve runs for weeks (a payer joins, another's portal or asynchronous support changes), and a
 * catalog read only at start would answer a payer that joined since as not resolved, a check for
 * a person, until a restart. Each refresh asks only for what changed (updatedSince) and is saved,
 * so a restart with the service away starts from it; one that fails keeps the catalog as it was.
 */
export class CatalogKeeper {
  private catalog: PayerCatalog | undefined;
  private refreshing: Promise<PayerCatalog | undefined> | undefined;
  /** When the catalog was last asked for (the sync's clock, ms). */
  private askedAt = Number.NEGATIVE_INFINITY;
  /** When the whole network was last listed (the sync's clock, ms): see WHOLE_EVERY_MS. */
  private wholeAt: number;
  /** What the last refresh failed with; undefined once one succeeds. Its warning is said once, not at every failed refresh of an outage. */
  private lastError: unknown;
  private timer: NodeJS.Timeout | undefined;
  private stopped = false;
  /** When the service last gave the catalog (the sync's clock, ms): an answer to this plugin's API key too. */
  answeredAt: number | undefined;

  constructor(private readonly options: CatalogKeeperOptions) {
    // The start's refresh asks for what changed since the saved copy (for the whole network when none is saved); the whole, a day later.
    this.wholeAt = options.now().getTime();
  }

  get current(): PayerCatalog | undefined {
    return this.catalog;
  }

  /**
   * The saved catalog brought up to date from the service; the saved one alone when the service
   * does not answer. With none saved: undefined while the service is away (a first start in an
   * outage, see fetchUntilGiven), and an error when it refused (a wrong key or URL: the operator's
   * to fix, not to wait for).
   */
  async load(): Promise<PayerCatalog | undefined> {
    const previous = await PayerCatalog.load(this.options.file, undefined, { unreadable: this.unreadable }).catch(() => undefined);
    this.catalog = previous;
    const fetched = await this.refresh();
    if (fetched || previous) return fetched ?? previous;
    if (this.lastError instanceof ServiceError && this.lastError.mayPassLater) return undefined;
    throw new Error(`payer catalog: cannot be fetched from the service and none is saved (${this.failure})`);
  }

  /** Whether the last refresh failed, said once (the one it has kept, or none yet): the next are not news until one succeeds. */
  get failing(): boolean {
    return this.lastError !== undefined;
  }

  /** Why the catalog could not be fetched last, in a line; empty when the last refresh succeeded. */
  get failure(): string {
    return this.lastError === undefined ? '' : errorText(this.lastError);
  }

  /**
   * With no catalog yet: asks the service for it again, waiting from backoff.baseMs to
   * backoff.maxMs between tries, until it gives it; then `given`, unless stop() came first.
   */
  fetchUntilGiven(backoff: { baseMs: number; maxMs: number }, given: () => void): void {
    const tryAfter = (waitMs: number) => {
      if (this.stopped) return;
      this.timer = setTimeout(() => {
        void this.refresh().then((fetched) => {
          if (this.stopped) return;
          if (fetched) given();
          else tryAfter(Math.min(waitMs * 2, backoff.maxMs));
        });
      }, waitMs);
    };
    tryAfter(backoff.baseMs);
  }

  /** Refreshes the catalog every refreshMs from now until stop(). */
  start(): void {
    if (this.options.refreshMs === 0 || this.stopped) return;
    this.timer = setTimeout(() => {
      void this.refresh().finally(() => this.start());
    }, this.options.refreshMs);
    // A sync stopped without stop() (an embedder's test, say) is not kept alive by its catalog.
    this.timer.unref();
  }

  /**
   * For a payer the catalog does not know, which may have joined the network since: the catalog
   * brought up to date, or undefined when it was asked for less than CATALOG_ASK_AGAIN_MS ago or
   * the service did not give it.
   */
  async again(): Promise<PayerCatalog | undefined> {
    if (this.refreshing) return this.refreshing;
    // Asked for at a time still to come (the clock stepped back since): asked again, or not for as long as the step, an hour or a day.
    const since = this.options.now().getTime() - this.askedAt;
    if (since >= 0 && since < CATALOG_ASK_AGAIN_MS) return undefined;
    return this.refresh();
  }

  /** Stops the refreshes and waits for one under way. */
  async stop(): Promise<void> {
    this.stopped = true;
    if (this.timer) clearTimeout(this.timer);
    await this.refreshing;
  }

  /** One refresh at a time: the checks that find a payer unknown together share it. */
  private refresh(): Promise<PayerCatalog | undefined> {
    this.refreshing ??= this.fetch().finally(() => (this.refreshing = undefined));
    return this.refreshing;
  }

  private async fetch(): Promise<PayerCatalog | undefined> {
    this.askedAt = this.options.now().getTime();
    // Whole too after the clock stepped back: what changed would be asked for since a time the service's clock has not reached.
    const whole = this.askedAt - this.wholeAt >= WHOLE_EVERY_MS || this.askedAt < this.wholeAt;
    let fetched: PayerCatalog;
    try {
      fetched = await PayerCatalog.sync(this.options.client, this.catalog, { unreadable: this.unreadable, full: whole });
    } catch (err) {
      if (this.catalog && this.lastError === undefined) this.options.logger.warn({ err: errorText(err) }, 'payer catalog refresh failed; using the one it has');
      this.lastError = err;
      return undefined;
    }
    if (this.lastError !== undefined && this.catalog) this.options.logger.info('payer catalog refreshed again');
    this.lastError = undefined;
    this.answeredAt = this.askedAt;
    this.catalog = fetched;
    if (whole) this.wholeAt = this.askedAt;
    // Used even when it cannot be saved: a restart then starts from the last copy saved, and brings it up to date.
    await fetched.save(this.options.file).catch((err: unknown) => this.options.logger.warn({ err: errorText(err) }, 'payer catalog: could not be saved'));
    return fetched;
  }

  private readonly unreadable = (described: string[]) => this.options.logger.warn({ items: described.length, first: described[0] }, 'payer catalog: entries that could not be read are left out');
}
