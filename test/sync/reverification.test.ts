import type { Appointment, Coverage, CoverageEligibilityRequest, CoverageEligibilityResponse, Patient } from 'fhir/r4';
import { ClinicRoutingFile, loadClinicRouting } from '../../src/adapters/clinic-routing';
import { frame } from '../../src/service/mllp-framing';
import { MllpListener } from '../../src/service/mllp-listener';
import { segment } from '../adapters/hl7/segment';
import { createLogger } from '../../src/service/logger';
import { client } from '../service/mllp-client';
import { startScriptedServer } from '../support/http-server';
import { WEBHOOK_PATH } from '../../src/verification/webhook';
import { chartOf, searchFhir, startHarness, startSyncInstance, until, type Harness, type HarnessOptions } from './harness';

/** Freshness and re-verification on an injected clock: the days pass in milliseconds. */
describe('fresh results and re-verification before the visit', () => {
  let h: Harness;
  let clock: Date;
  const closing: Array<() => Promise<void>> = [];
  afterEach(async () => {
    for (const close of closing.splice(0)) await close();
    await h.close();
  });

  const checkOf = async (key: string) => (await h.store.listChecks()).find((r) => r.key === key);
  const verificationPosts = () => h.sandbox.requestLog.filter((r) => r.method === 'POST' && r.path.includes('insurance-verification')).length;
  /** How many verifications' results /metrics counts under `outcome`. */
  const outcomesCounted = async (outcome: string) => Number(new RegExp(`^dental_elig_outcomes_total\\{outcome="${outcome}"\\} (\\d+)$`, 'm').exec(await h.sync.metrics.text())?.[1] ?? 0);
  /** SIU S12 bookings of one patient on Guardian (SBX-COMPLETE), sent at `sent`: message id, appointment id, visit start. */
  const bookingsOf = (patientId: string, sent: string) => (id: string, appointment: string, start: string) =>
    [
      `MSH|^~\\&|SMILECLOUD|BSD-MAIN|ELIG|BSD|${sent}||SIU^S12^SIU_S12|${id}|P|2.5.1`,
      `SCH|${appointment}^SC||||||||||^^^${start}`,
      `PID|1||${patientId}^^^SC^MR||DOE^JANE||19800102|F`,
      segment('IN1', { 1: '1', 3: '64246', 4: 'Guardian', 17: 'SEL', 36: 'SBX-COMPLETE' }),
    ].join('\r');

  /** Cigna is asynchronous at the sandbox, Guardian synchronous. */
  const cigna = (m: string) => m.replace('|64246|Guardian|', '|62308|Cigna Dental|');
  /** The booking as a move (S13) of its appointment to the visit it states. */
  const asMove = (m: string) => m.replace('SIU^S12^SIU_S12', 'SIU^S13^SIU_S12');

  /** A sync started with `options`, and an MLLP client of its listener over a real socket. */
  const mllpInto = async (options: HarnessOptions) => {
    h = await startHarness(options);
    const listener = new MllpListener({ handler: (m) => h.sync.receiveHl7(m) });
    const { port } = await listener.start();
    closing.push(() => listener.stop());
    const c = await client(port);
    closing.unshift(async () => void c.socket.end());
    return c;
  };

  /** A sync on the clock from `at`, and a sender of bookings of one patient over a real MLLP socket, each waited for until written. */
  const bookingOverMllp = async (patientId: string, at: string) => {
    clock = new Date(at);
    const c = await mllpInto({ now: () => clock, settings: { freshnessDays: 7, reverifyLeadDays: 1 } });
    const booking = bookingsOf(patientId, '20261220090000');
    let sent = 0;
    return async (appointment: string, start: string) => {
      c.socket.write(frame(booking(`M-${appointment}`, appointment, start)));
      await c.waitFor(++sent);
      await until(`${appointment} written`, async () => (await h.store.listChecks({ states: ['written'] })).length === sent);
    };
  };

  it('verifies again the day before the visit once the last result is older than the window, as a new verification', async () => {
    clock = new Date('2026-11-01T12:00:00Z');
    h = await startHarness({ now: () => clock, settings: { freshnessDays: 7, reverifyLeadDays: 1 } });
    await h.fhir.seed(chartOf('self')); // the visit: 2026-12-01
    await fetch(`${h.httpUrl}/fhir-notifications/Appointment/appt-1001`, { method: 'POST' });
    const first = await until('first result written', async () => (await h.store.listChecks({ states: ['written'] }))[0]);
    expect(first.dueAt).toBe('2026-11-30T00:00:00.000Z');
    expect(verificationPosts()).toBe(1);

    clock = new Date('2026-11-29T23:00:00Z');
    await new Promise((r) => setTimeout(r, 300));
    expect(verificationPosts()).toBe(1);

    clock = new Date('2026-11-30T06:00:00Z');
    const again = await until('re-verified', async () => {
      const [row] = await h.store.listChecks({ states: ['written'] });
      return row?.round === 1 && row;
    });
    expect(verificationPosts()).toBe(2);
    expect(again.externalId).not.toBe(first.externalId);
    // The visit is tomorrow: nothing more is scheduled.
    expect(again.dueAt).toBeUndefined();
    // Each pair is dated by the sync's clock, as the store's rows are, not by the machine's.
    const created = async (type: string) => ((await searchFhir(h.fhir, type)) as Array<{ created?: string }>).map((r) => r.created).sort();
    const rounds = ['2026-11-01T12:00:00.000Z', '2026-11-30T06:00:00.000Z'];
    expect(await created('CoverageEligibilityResponse')).toEqual(rounds);
    expect(await created('CoverageEligibilityRequest')).toEqual(rounds);
  });

  it('measures the lead time from the visit\'s midnight where the clinic is: a Sydney visit is verified again 24 hours before its day begins there', async () => {
    clock = new Date('2026-11-01T12:00:00Z');
    const routing = ClinicRoutingFile.parse({ ...loadClinicRouting(), timeZone: 'Australia/Sydney' });
    h = await startHarness({ now: () => clock, settings: { freshnessDays: 7, reverifyLeadDays: 1 }, routing });
    // 9 am on 1 December in Sydney (AEDT, +11): the day begins at 13:00 UTC on 30 November.
    await h.fhir.seed(chartOf('self').map((r) => (r.resourceType === 'Appointment' ? { ...r, start: '2026-12-01T09:00:00+11:00', end: '2026-12-01T10:00:00+11:00' } : r)));
    await fetch(`${h.httpUrl}/fhir-notifications/Appointment/appt-1001`, { method: 'POST' });
    const first = await until('first result written', async () => (await h.store.listChecks({ states: ['written'] }))[0]);
    expect(first.check.dateOfService).toBe('2026-12-01');
    expect(first.dueAt).toBe('2026-11-29T13:00:00.000Z');

    clock = new Date('2026-11-29T14:00:00Z');
    await until('re-verified', async () => (await h.store.listChecks({ states: ['written'] }))[0]?.round === 1);
    expect(verificationPosts()).toBe(2);
  });

  it('does not verify again for a visit that was cancelled, and does once it is booked again', async () => {
    clock = new Date('2026-11-01T12:00:00Z');
    h = await startHarness({ now: () => clock, settings: { freshnessDays: 7, reverifyLeadDays: 1 } });
    const chart = chartOf('self'); // the visit: 2026-12-01
    await h.fhir.seed(chart);
    const notify = () => fetch(`${h.httpUrl}/fhir-notifications/Appointment/appt-1001`, { method: 'POST' });
    await notify();
    const first = await until('first result written', async () => (await h.store.listChecks({ states: ['written'] }))[0]);
    expect(first.dueAt).toBe('2026-11-30T00:00:00.000Z');

    const appointment = chart.find((r) => r.resourceType === 'Appointment') as Appointment;
    await h.fhir.seed([{ ...appointment, status: 'cancelled' }]);
    await notify();
    await until('re-verification withdrawn', async () => (await checkOf(first.key))?.dueAt === undefined);
    clock = new Date('2026-11-30T06:00:00Z');
    await new Promise((r) => setTimeout(r, 300));
    expect(verificationPosts()).toBe(1);
    expect((await checkOf(first.key))?.state).toBe('written');

    clock = new Date('2026-11-20T12:00:00Z');
    await h.fhir.seed([appointment]);
    await notify();
    await until('re-verification scheduled again', async () => (await checkOf(first.key))?.dueAt === '2026-11-30T00:00:00.000Z');
    expect(verificationPosts()).toBe(1);
  });

  it('re-verifies a later visit with the result another visit of the coverage was re-verified with days before, not anew', async () => {
    const book = await bookingOverMllp('P-10', '2026-12-01T12:00:00Z');
    await book('APT-R1', '20261214093000');
    await book('APT-R2', '20261216093000');
    expect(verificationPosts()).toBe(1);
    const visit = async (date: string) => (await h.store.listChecks()).find((r) => r.check.dateOfService === date);
    expect((await visit('2026-12-16'))?.dueAt).toBe('2026-12-15T00:00:00.000Z');

    clock = new Date('2026-12-13T06:00:00Z');
    await until('the first visit re-verified', async () => (await visit('2026-12-14'))?.round === 1 && (await visit('2026-12-14'))?.state === 'written');
    expect(verificationPosts()).toBe(2);

    // Two days later the second visit's result is old, but the first's new one is two days old and tells of December 16.
    clock = new Date('2026-12-15T06:00:00Z');
    const second = await until('the second visit re-verified', async () => {
      const row = await visit('2026-12-16');
      return row?.round === 1 && row.state === 'written' && row;
    });
    expect(verificationPosts()).toBe(2);
    expect(second.reusedFrom).toBe((await visit('2026-12-14'))?.correlationId);
    expect(second.dueAt).toBeUndefined();
  });

  it('verifies two visits of one plan booked back to back once: the second waits for the first verification under way and takes its result', async () => {
    clock = new Date('2026-12-01T12:00:00Z');
    const c = await mllpInto({ now: () => clock, settings: { freshnessDays: 7, reverifyLeadDays: 1 } });
    const booking = bookingsOf('P-11', '20261201090000');
    // Cigna is asynchronous at the sandbox: the first verification is still under way when the second booking is sent.
    c.socket.write(frame(cigna(booking('T1', 'APT-T1', '20261207093000'))));
    c.socket.write(frame(cigna(booking('T2', 'APT-T2', '20261209093000'))));
    await c.waitFor(2);
    const [first, second] = await until('both written', async () => {
      // A second at each look: the one that waits looks again after pollAfterMs.
      clock = new Date(clock.getTime() + 1000);
      const rows = await h.store.listChecks({ states: ['written'] });
      return rows.length === 2 && rows.sort((a, b) => a.check.dateOfService.localeCompare(b.check.dateOfService));
    });
    expect(verificationPosts()).toBe(1);
    expect(second?.reusedFrom).toBe(first?.correlationId);
    expect(await searchFhir(h.fhir, 'CoverageEligibilityResponse')).toHaveLength(2);
  });

  /**
   * Books a visit of `patientId` on December 7 (on the payer `payer` makes it) and moves it to the
   * 9th once its check is `under` way: the booked visit's check as it was when moved, and `moveTo`,
   * which sends the visit's move to another start (`n`: the message's number).
   */
  const bookThenMove = async (c: Awaited<ReturnType<typeof mllpInto>>, patientId: string, under: 'submitted' | 'awaiting-result', payer = (m: string) => m) => {
    const booking = bookingsOf(patientId, '20261201090000');
    c.socket.write(frame(payer(booking(`${patientId}-1`, `APT-${patientId}`, '20261207093000'))));
    await c.waitFor(1);
    const booked = await until(`the first verification ${under}`, async () => (await h.store.listChecks({ states: [under] }))[0]);
    const moveTo = async (n: number, start: string) => {
      c.socket.write(frame(asMove(payer(booking(`${patientId}-${n}`, `APT-${patientId}`, start)))));
      await c.waitFor(n);
    };
    await moveTo(2, '20261209093000');
    return { booked, moveTo };
  };

  /** bookThenMove, and the moved visit waited for until written: the booked visit's check as it was when moved, the moved one's, and the booked one's as it ends. */
  const movedWhile = async (c: Awaited<ReturnType<typeof mllpInto>>, patientId: string, under: 'submitted' | 'awaiting-result', payer = (m: string) => m) => {
    const { booked } = await bookThenMove(c, patientId, under, payer);
    const moved = await until('the moved visit written', async () => (await h.store.listChecks({ states: ['written'] })).find((r) => r.check.dateOfService === '2026-12-09'));
    return { booked, moved, cancelled: await checkOf(booked.key) };
  };

  it('verifies a visit moved while its asynchronous verification is under way once: the moved visit waits for the result the cancelled one still takes', async () => {
    const c = await mllpInto({ sandbox: { timing: { asyncCompletionMs: 1200, webhookBackoffMs: 200 } } });
    const { booked, moved, cancelled } = await movedWhile(c, 'P-12', 'awaiting-result', cigna);
    expect(verificationPosts()).toBe(1);
    expect(moved.reusedFrom).toBe(booked.correlationId);
    expect(cancelled).toMatchObject({ state: 'cancelled', correlationId: booked.correlationId, result: { correlationId: booked.correlationId } });
    // Its webhook brought what it was polled for: nothing of it is due (its poll would come webhookDeadlineMs after its send).
    expect(cancelled?.dueAt).toBeUndefined();
    expect(await searchFhir(h.fhir, 'CoverageEligibilityResponse')).toHaveLength(1);
    // The one verification the service did is counted once, though the check that took it is cancelled and the moved one's result is reused.
    expect(await outcomesCounted('completed')).toBe(1);
  });

  it('polls the verification of a visit moved while it was under way when no webhook comes, and the moved visit takes its result', async () => {
    const c = await mllpInto({});
    // Every delivery refused: the result comes only by polling, as one sent while serve was down does once its tries are spent.
    h.sandbox.configureWebhook({ url: `${h.httpUrl}/nowhere`, secret: h.secret });
    const { booked, moved, cancelled } = await movedWhile(c, 'P-14', 'awaiting-result', cigna);
    expect(verificationPosts()).toBe(1);
    expect(moved.reusedFrom).toBe(booked.correlationId);
    expect(cancelled).toMatchObject({ state: 'cancelled', result: { correlationId: booked.correlationId } });
    // Followed no longer once it has its result: nothing of it is due.
    expect(cancelled?.dueAt).toBeUndefined();
    expect(await outcomesCounted('completed')).toBe(1);
  });

  it('counts the result of a visit moved while it was under way once when its webhook comes while its poll is on its way', async () => {
    const c = await mllpInto({});
    // The webhook's deliveries refused and kept here, to be brought to serve once the cancelled check's poll is at the service,
    // whose answer is held back 2 s: both bring the one result.
    const deliveries = await startScriptedServer((_req, res) => void res.writeHead(500).end());
    closing.push(() => deliveries.close());
    h.sandbox.configureWebhook({ url: deliveries.url, secret: h.secret });
    h.sandbox.injectFault({ method: 'GET', path: /insurance-verifications\//, delayMs: 2000 });
    const { booked } = await bookThenMove(c, 'P-19', 'awaiting-result', cigna);
    const delivery = await until('the webhook sent', async () => deliveries.requests[0]);
    const polling = () => h.sandbox.requestLog.find((r) => r.method === 'GET' && r.path.includes('/insurance-verifications/'));
    await until('the cancelled check polled', async () => polling()?.status === 0);
    const { 'webhook-id': id, 'webhook-timestamp': timestamp, 'webhook-signature': signature } = delivery.headers;
    const headers = { 'content-type': 'application/json', 'webhook-id': String(id), 'webhook-timestamp': String(timestamp), 'webhook-signature': String(signature) };
    expect((await fetch(`${h.httpUrl}${WEBHOOK_PATH}`, { method: 'POST', headers, body: delivery.body })).status).toBeLessThan(300);
    const moved = await until('the moved visit written', async () => (await h.store.listChecks({ states: ['written'] })).find((r) => r.check.dateOfService === '2026-12-09'));
    expect(moved.reusedFrom).toBe(booked.correlationId);
    // The poll answered and its step done.
    await until('the poll answered', async () => polling()?.status === 200);
    await until('no check in hand', async () => /^dental_elig_checks_in_hand 0$/m.test(await h.sync.metrics.text()));
    expect(verificationPosts()).toBe(1);
    expect(await outcomesCounted('completed')).toBe(1);
  });

  it('verifies a visit moved away and back while its asynchronous verification is under way once: its check, followed still, is its own again', async () => {
    // Every delivery refused, so the result waits for a poll: the moves land before it comes.
    const c = await mllpInto({});
    h.sandbox.configureWebhook({ url: `${h.httpUrl}/nowhere`, secret: h.secret });
    const { booked, moveTo } = await bookThenMove(c, 'P-15', 'awaiting-result', cigna);
    await moveTo(3, '20261207093000');

    const written = await until('the visit written', async () => (await h.store.listChecks({ states: ['written'] })).find((r) => r.key === booked.key));
    expect(verificationPosts()).toBe(1);
    expect(written).toMatchObject({ round: booked.round, correlationId: booked.correlationId, result: { correlationId: booked.correlationId } });
    expect(await searchFhir(h.fhir, 'CoverageEligibilityResponse')).toHaveLength(1);
  });

  it('verifies a visit moved while its synchronous verification is under way once: the answer is kept on the cancelled check, and the moved one takes it', async () => {
    // Every request of the sandbox's takes 1.5 s: the move lands while Guardian's synchronous verification is answered.
    const c = await mllpInto({ sandbox: { timing: { latencyMs: 1500 } } });
    const { moved, cancelled } = await movedWhile(c, 'P-13', 'submitted');
    expect(verificationPosts()).toBe(1);
    expect(cancelled?.state).toBe('cancelled');
    expect(cancelled?.correlationId).toBeDefined();
    expect(moved.reusedFrom).toBe(cancelled?.correlationId);
    expect(await searchFhir(h.fhir, 'CoverageEligibilityResponse')).toHaveLength(1);
    expect(await outcomesCounted('completed')).toBe(1);
  });

  // webhookDeadlineMs past the test's time: the moved visit is sent only if the cancelled check stops counting as under way.
  const waitsLong = { webhookDeadlineMs: 10 * 60_000 };

  it('sends a visit moved while its verification was sent at once when that send fails: no verification is at the service to wait for', async () => {
    // The first send answered 500 after 1.5 s, not retried by the client: the move lands while it is on its way.
    const c = await mllpInto({ settings: waitsLong, service: { maxRetries: 0 } });
    h.sandbox.injectFault({ method: 'POST', path: /insurance-verification/, status: 500, delayMs: 1500 });
    const { booked, moved, cancelled } = await movedWhile(c, 'P-16', 'submitted');
    expect(verificationPosts()).toBe(2);
    expect(moved.reusedFrom).toBeUndefined();
    expect(cancelled).toMatchObject({ state: 'cancelled', round: booked.round });
    expect(cancelled?.submittedAt).toBeUndefined();
    expect(await searchFhir(h.fhir, 'CoverageEligibilityResponse')).toHaveLength(1);
  });

  it('sends a visit moved while its verification waited to be sent again after a failed send at once: none of it is at the service', async () => {
    // The first send answered 500, its retry a minute off: the move lands while it waits.
    const c = await mllpInto({ settings: { ...waitsLong, backoffBaseMs: 120_000, backoffMaxMs: 120_000 }, service: { maxRetries: 0 } });
    h.sandbox.injectFault({ method: 'POST', path: /insurance-verification/, status: 500 });
    const booking = bookingsOf('P-17', '20261201090000');
    c.socket.write(frame(booking('R1', 'APT-R1', '20261207093000')));
    await c.waitFor(1);
    const waiting = await until('the first send failed', async () => (await h.store.listChecks({ states: ['received'] })).find((r) => r.submittedAt !== undefined));
    c.socket.write(frame(asMove(booking('R2', 'APT-R1', '20261209093000'))));
    await c.waitFor(2);
    const moved = await until('the moved visit written', async () => (await h.store.listChecks({ states: ['written'] })).find((r) => r.check.dateOfService === '2026-12-09'));
    expect(verificationPosts()).toBe(2);
    expect(moved.reusedFrom).toBeUndefined();
    expect(await checkOf(waiting.key)).toMatchObject({ state: 'cancelled' });
  });

  /**
   * A Cigna visit whose first send's answer is held back past the client's 2 s timeout and whose retry
   * (`backoffBaseMs` on) is answered 500 as `retry` says, if given, moved once `moveWhen` finds its check: the
   * cancelled check, the first maybe at the service still, asks for it under its externalId, and the moved visit takes its result.
   */
  const movedAfterLostAnswer = async (patientId: string, backoffBaseMs: number, retry: { delayMs?: number } | undefined, moveWhen: (r: Awaited<ReturnType<typeof checkOf>>) => boolean) => {
    const c = await mllpInto({ settings: { ...waitsLong, backoffBaseMs, backoffMaxMs: 120_000 }, service: { maxRetries: 0, timeoutMs: 2000 } });
    h.sandbox.injectFault({ method: 'POST', path: /insurance-verification/, delayMs: 4000 });
    if (retry) h.sandbox.injectFault({ method: 'POST', path: /insurance-verification/, status: 500, ...retry });
    const booking = bookingsOf(patientId, '20261201090000');
    c.socket.write(frame(cigna(booking(`${patientId}-1`, `APT-${patientId}`, '20261207093000'))));
    await c.waitFor(1);
    const before = await until('the moment to move it', async () => (await h.store.listChecks({ states: ['received', 'submitted'] })).find(moveWhen));
    c.socket.write(frame(asMove(cigna(booking(`${patientId}-2`, `APT-${patientId}`, '20261209093000')))));
    await c.waitFor(2);
    const moved = await until('the moved visit written', async () => (await h.store.listChecks({ states: ['written'] })).find((r) => r.check.dateOfService === '2026-12-09'));
    const cancelled = await checkOf(before.key);
    expect(cancelled).toMatchObject({ state: 'cancelled', externalId: before.externalId });
    expect(cancelled?.correlationId).toBeDefined();
    expect(moved.reusedFrom).toBe(cancelled?.correlationId);
    expect(await searchFhir(h.fhir, 'CoverageEligibilityResponse')).toHaveLength(1);
    return before;
  };

  it('verifies a visit moved while its send, unanswered, waited to be sent again once: the cancelled check asks for it under its externalId', async () => {
    // Its retry two minutes off: the service may have taken the first.
    const waiting = await movedAfterLostAnswer('P-19', 120_000, undefined, (r) => r?.lastError !== undefined);
    expect(verificationPosts()).toBe(2);
    // Its answer lost, it waited as sent, not put back as one the service never had.
    expect(waiting.state).toBe('submitted');
  });

  it('verifies a visit moved once where its send went unanswered and its retry was answered 500: the first may be at the service still', async () => {
    // The retry 3 s on answered 500 at once, the next 6 s after that: the move lands while it waits.
    const waiting = await movedAfterLostAnswer('P-21', 3000, {}, (r) => r?.lastError?.startsWith('500') === true);
    expect(waiting.state).toBe('submitted');
  });

  it('verifies a visit moved once while the retry of a send that went unanswered is on its way and then answered 500', async () => {
    // The retry 1 s on answered 500 after 1.5 s: the move lands while it is on its way.
    await movedAfterLostAnswer('P-22', 1000, { delayMs: 1500 }, (r) => r?.state === 'submitted' && r.attempts === 2);
  });

  it('verifies a visit moved once where its own send, answered 504, never reached the service and the cancelled check\'s result came late: due to be sent again, it takes that result', async () => {
    // The booked visit's verification pending 3 s at the service, let go after 1.5 s (pendingGiveUpMs): the moved visit is sent then, and its
    // send answered 504 without reaching the service; its retry is 4 to 8 s off. Deliveries refused and kept, brought to serve by the test.
    const settings = { webhookDeadlineMs: 500, pendingGiveUpMs: 1500, backoffBaseMs: 8000, backoffMaxMs: 8000 };
    const c = await mllpInto({ settings, service: { maxRetries: 0 }, sandbox: { timing: { asyncCompletionMs: 3000, webhookBackoffMs: 200 } } });
    const deliveries = await startScriptedServer((_req, res) => void res.writeHead(500).end());
    closing.push(() => deliveries.close());
    h.sandbox.configureWebhook({ url: deliveries.url, secret: h.secret });
    const { booked } = await bookThenMove(c, 'P-23', 'awaiting-result', cigna);
    h.sandbox.injectFault({ method: 'POST', path: /insurance-verification/, status: 504 });
    const lost = await until('the moved visit sent, its answer lost', async () =>
      (await h.store.listChecks({ states: ['submitted'] })).find((r) => r.check.dateOfService === '2026-12-09' && r.lastError?.startsWith('504') === true),
    );
    const delivery = await until('the booked visit\'s result sent', async () => deliveries.requests[0]);
    const { 'webhook-id': id, 'webhook-timestamp': timestamp, 'webhook-signature': signature } = delivery.headers;
    const headers = { 'content-type': 'application/json', 'webhook-id': String(id), 'webhook-timestamp': String(timestamp), 'webhook-signature': String(signature) };
    expect((await fetch(`${h.httpUrl}${WEBHOOK_PATH}`, { method: 'POST', headers, body: delivery.body })).status).toBeLessThan(300);
    expect(await checkOf(booked.key)).toMatchObject({ state: 'cancelled', result: { correlationId: booked.correlationId } });

    const next = await until('the moved visit past its send', async () => {
      const row = await checkOf(lost.key);
      return row?.state !== 'submitted' && row;
    });
    expect(next.reusedFrom).toBe(booked.correlationId);
    const moved = await until('the moved visit written', async () => (await h.store.listChecks({ states: ['written'] })).find((r) => r.key === lost.key));
    // Its own send given up: none of it is at the service for another visit to wait for.
    expect(moved.submittedAt).toBeUndefined();
    // One verification reached the service, the booked visit's.
    expect(h.sandbox.requestLog.filter((r) => r.method === 'POST' && r.path === '/v2/insurance-verification-requests' && r.status !== 504)).toHaveLength(1);
  });

  it('verifies a visit moved while its send went unanswered once: the cancelled check is sent again under its externalId, and the moved visit takes that verification\'s result', async () => {
    // The first send's answer held back 4 s, past the client's 2 s timeout and not retried by it: the move lands while it is on its way,
    // and the service may have taken it all the same.
    const c = await mllpInto({ settings: waitsLong, service: { maxRetries: 0, timeoutMs: 2000 } });
    h.sandbox.injectFault({ method: 'POST', path: /insurance-verification/, delayMs: 4000 });
    const { booked, moved, cancelled } = await movedWhile(c, 'P-18', 'submitted', cigna);
    expect(cancelled).toMatchObject({ state: 'cancelled', round: booked.round, externalId: booked.externalId });
    expect(cancelled?.correlationId).toBeDefined();
    expect(moved.reusedFrom).toBe(cancelled?.correlationId);
    // Sent twice, under one externalId: one verification at the service.
    expect(verificationPosts()).toBe(2);
    expect(await searchFhir(h.fhir, 'CoverageEligibilityResponse')).toHaveLength(1);
    expect(await outcomesCounted('completed')).toBe(1);
  });

  it.each([
    // Every delivery refused, so the followed check's result comes only by its poll, webhookDeadlineMs after its send: the ADTs land before it.
    ['followed for its result', false],
    // Its webhook delivered: the moved visit is written with that result before the ADTs.
    ['holding its result', true],
  ])('verifies a visit moved while its verification was at the service anew once the plan is dropped and stated again, the cancelled check %s: that result was asked for before the drop', async (_how, delivered) => {
    // Fresh on the moved visit's day, that result would serve its check, a new round once the plan is stated again. The move lands before it.
    const c = await mllpInto({ settings: { freshnessDays: 20 }, sandbox: { timing: { asyncCompletionMs: 1200, webhookBackoffMs: 200 } } });
    if (!delivered) h.sandbox.configureWebhook({ url: `${h.httpUrl}/nowhere`, secret: h.secret });
    const booking = bookingsOf('P-20', '20261201090000');
    c.socket.write(frame(cigna(booking('D1', 'APT-D1', '20261207093000'))));
    await c.waitFor(1);
    const booked = await until('the first verification accepted', async () => (await h.store.listChecks({ states: ['awaiting-result'] }))[0]);
    c.socket.write(frame(asMove(cigna(booking('D2', 'APT-D1', '20261209093000')))));
    await c.waitFor(2);
    expect(await checkOf(booked.key)).toMatchObject({ state: 'cancelled', correlationId: booked.correlationId });
    if (delivered) await until('the moved visit written', async () => (await h.store.listChecks({ states: ['written'] })).length === 1);
    // The PMS drops the plan, another in its place, then states it again: perhaps a plan ended and a new enrolment begun.
    const adt = (id: string, sent: string, ...plans: Array<[string, string, string]>) =>
      [
        `MSH|^~\\&|SMILECLOUD|BSD-MAIN|ELIG|BSD|${sent}||ADT^A08^ADT_A01|${id}|P|2.5.1`,
        'PID|1||P-20^^^SC^MR||DOE^JANE||19800102|F',
        ...plans.map(([payerId, payer, member], i) => segment('IN1', { 1: String(i + 1), 3: payerId, 4: payer, 17: 'SEL', 36: member })),
      ].join('\r');
    const guardian: [string, string, string] = ['64246', 'Guardian', 'SBX-COMPLETE-2'];
    c.socket.write(frame(adt('D3', '20261201100000', guardian)));
    await c.waitFor(3);
    c.socket.write(frame(adt('D4', '20261201110000', guardian, ['62308', 'Cigna Dental', 'SBX-COMPLETE'])));
    await c.waitFor(4);

    const restated = await until('the restated visit written', async () =>
      (await h.store.listChecks({ states: ['written'] })).find((r) => r.check.dateOfService === '2026-12-09' && r.check.coverage.payer.name === 'Cigna Dental'),
    );
    expect(restated.reusedFrom).toBeUndefined();
    // Cigna's verifications, asynchronous: the one the moved visit's followed and the restated plan's own.
    expect(h.sandbox.requestLog.filter((r) => r.method === 'POST' && r.path === '/v2/insurance-verification-requests')).toHaveLength(2);
    // Marked with its plan's drop, the cancelled check is followed no longer.
    expect(await checkOf(booked.key)).toMatchObject({ state: 'cancelled', planDroppedAt: expect.any(String) });
    expect((await checkOf(booked.key))?.dueAt).toBeUndefined();
  });

  /**
   * A visit in a FHIR chart (self: Delta Dental of California, asynchronous at the sandbox) booked on December 1 and moved
   * to the 3rd once its verification is accepted, with a sync started with `options`, every webhook refused: the booked
   * visit's check, the patient's Coverage, the chart, and a notifier of a resource's change.
   */
  const fhirMovedWhileAtService = async (options: HarnessOptions) => {
    h = await startHarness(options);
    h.sandbox.configureWebhook({ url: `${h.httpUrl}/nowhere`, secret: h.secret });
    const chart = chartOf('self');
    await h.fhir.seed(chart);
    const notify = async (reference: string) => expect((await fetch(`${h.httpUrl}/fhir-notifications/${reference}`, { method: 'POST' })).status).toBe(200);
    await notify('Appointment/appt-1001');
    const booked = await until('the first verification accepted', async () => (await h.store.listChecks({ states: ['awaiting-result'] }))[0]);
    const appointment = chart.find((r) => r.resourceType === 'Appointment') as Appointment;
    await h.fhir.seed([{ ...appointment, start: '2026-12-03T09:00:00-08:00', end: '2026-12-03T10:00:00-08:00' }]);
    await notify('Appointment/appt-1001');
    expect(await checkOf(booked.key)).toMatchObject({ state: 'cancelled', correlationId: booked.correlationId });
    return { booked, coverage: chart.find((r) => r.resourceType === 'Coverage') as Coverage, chart, notify };
  };

  it.each([
    ['deleted', 'delete'],
    ['moved to another patient', 'move'],
    ['ended (its status cancelled)', 'end'],
    // The chart's changes read together: the appointment, read again, holds the same check as before.
    ['deleted, the new one made before the appointment is read again', 'swap'],
  ] as const)('verifies a FHIR visit moved while its verification was at the service anew once its Coverage is %s and a new one of the plan made: that result was asked for before the drop', async (_how, how) => {
    // The followed check's result comes only by its poll, webhookDeadlineMs after its send: the changes land before it.
    const { booked, coverage, chart, notify } = await fhirMovedWhileAtService({ settings: { freshnessDays: 20, webhookDeadlineMs: 6000 }, sandbox: { timing: { asyncCompletionMs: 1200, webhookBackoffMs: 200 } } });
    // The chart drops the plan, then makes a Coverage of it again: perhaps a plan ended and a new enrolment begun.
    const gone = `Coverage/${coverage.id}`;
    if (how === 'delete' || how === 'swap') expect((await fetch(`${h.fhir.url}/${gone}`, { method: 'DELETE' })).ok).toBe(true);
    if (how === 'move') {
      const patient = chart.find((r) => r.resourceType === 'Patient') as Patient;
      await h.fhir.seed([{ ...patient, id: 'pat-other' }, { ...coverage, beneficiary: { reference: 'Patient/pat-other' }, subscriber: { reference: 'Patient/pat-other' } }]);
    }
    if (how === 'end') await h.fhir.seed([{ ...coverage, status: 'cancelled' }]);
    if (how !== 'swap') {
      await notify(gone);
      await until('the moved visit waiting for insurance', async () => (await h.store.listAppointments('awaiting-insurance')).length === 1);
    }
    await h.fhir.seed([{ ...coverage, id: 'cov-ellen-delta-2' }]);
    await notify('Coverage/cov-ellen-delta-2');
    if (how === 'swap') await notify(gone);

    const restated = await until(
      'the restated visit written',
      async () => (await h.store.listChecks({ states: ['written'] })).find((r) => r.check.dateOfService === '2026-12-03'),
      25_000,
    );
    expect(restated.reusedFrom).toBeUndefined();
    expect(verificationPosts()).toBe(2);
    // Marked with its plan's drop, the cancelled check is followed no longer.
    const cancelled = await checkOf(booked.key);
    expect(cancelled).toMatchObject({ state: 'cancelled', planDroppedAt: expect.any(String) });
    expect(cancelled?.dueAt).toBeUndefined();
  }, 40_000);

  it('lets go of a check followed at the service whose plan\'s drop marks it while its poll is on its way: it is polled no more', async () => {
    // No result for 30 s: the followed check is polled 1 s after its send, each poll's answer held back 2 s.
    const { booked, coverage, notify } = await fhirMovedWhileAtService({
      settings: { webhookDeadlineMs: 1000 },
      sandbox: { timing: { asyncCompletionMs: 30_000, webhookBackoffMs: 200 } },
      faults: [{ method: 'GET', path: /insurance-verifications\//, delayMs: 2000, times: Infinity }],
    });
    const polls = () => h.sandbox.requestLog.filter((r) => r.method === 'GET' && r.path.includes(`/insurance-verifications/${booked.correlationId}`));
    await until('the cancelled check polled', async () => (await checkOf(booked.key))?.state === 'cancelled' && polls().some((r) => r.status === 0));

    expect((await fetch(`${h.fhir.url}/Coverage/${coverage.id}`, { method: 'DELETE' })).ok).toBe(true);
    await notify(`Coverage/${coverage.id}`);
    const marked = await checkOf(booked.key);
    expect(marked).toMatchObject({ state: 'cancelled', planDroppedAt: expect.any(String) });
    const polled = polls().length;
    await until('the poll on its way answered', async () => polls().every((r) => r.status === 200));
    await until('followed no longer', async () => (await checkOf(booked.key))?.dueAt === undefined && /^dental_elig_checks_in_hand 0$/m.test(await h.sync.metrics.text()));
    expect(polls()).toHaveLength(polled);
  });

  it('verifies a visit moved while its re-verification is at the service once: the cancelled check, holding the last round\'s result, still takes this one\'s', async () => {
    clock = new Date('2026-12-01T12:00:00Z');
    // The moved check waits webhookDeadlineMs at most, on the clock the test moves on: longer than the sandbox takes to send the result.
    const settings = { freshnessDays: 7, reverifyLeadDays: 1, webhookDeadlineMs: 10 * 60_000 };
    const c = await mllpInto({ now: () => clock, settings, sandbox: { timing: { asyncCompletionMs: 1200, webhookBackoffMs: 200 } } });
    const booking = bookingsOf('P-14', '20261201090000');
    c.socket.write(frame(cigna(booking('V1', 'APT-V1', '20261214093000'))));
    await c.waitFor(1);
    const first = await until('the first result written', async () => (await h.store.listChecks({ states: ['written'] }))[0]);

    // The day before the visit: the result is stale, the visit verified again.
    clock = new Date('2026-12-13T06:00:00Z');
    const again = await until('the re-verification accepted', async () => {
      const row = await checkOf(first.key);
      return row?.round === 1 && row.state === 'awaiting-result' && row;
    });
    c.socket.write(frame(asMove(cigna(booking('V2', 'APT-V1', '20261216093000')))));
    await c.waitFor(2);

    const moved = await until('the moved visit written', async () => {
      // A second at each look: the one that waits looks again after pollAfterMs.
      clock = new Date(clock.getTime() + 1000);
      return (await h.store.listChecks({ states: ['written'] })).find((r) => r.check.dateOfService === '2026-12-16');
    });
    expect(verificationPosts()).toBe(2);
    expect(moved.reusedFrom).toBe(again.correlationId);
    expect(await checkOf(first.key)).toMatchObject({ state: 'cancelled', correlationId: again.correlationId, result: { correlationId: again.correlationId } });
  });

  it('verifies a visit in the next benefit year anew: a result counts what is used in its own year, and this year\'s maximum left is not next year\'s', async () => {
    const book = await bookingOverMllp('P-8', '2026-12-20T12:00:00Z');
    await book('APT-Y1', '20261230093000');
    await book('APT-Y2', '20270105093000');

    expect(verificationPosts()).toBe(2);
    const january = (await h.store.listChecks()).find((r) => r.check.dateOfService === '2027-01-05');
    expect(january?.reusedFrom).toBeUndefined();
    const responses = (await searchFhir(h.fhir, 'CoverageEligibilityResponse')) as CoverageEligibilityResponse[];
    const periodOf = (id: string | undefined) => responses.find((r) => r.id === id)?.insurance?.[0]?.benefitPeriod;
    expect(periodOf(january?.written?.responseId)).toEqual({ start: '2027-01-01', end: '2027-12-31' });
  });

  it('reuses this benefit year\'s result for another visit this year once a visit next year has been verified since', async () => {
    const book = await bookingOverMllp('P-9', '2026-12-20T12:00:00Z');
    await book('APT-Z1', '20261228093000');
    clock = new Date('2026-12-21T12:00:00Z');
    await book('APT-Z2', '20270105093000');
    // The newest fresh result is next year's: this year's, a day older, is the one that tells of December 30.
    clock = new Date('2026-12-22T12:00:00Z');
    await book('APT-Z3', '20261230093000');

    expect(verificationPosts()).toBe(2);
    const rows = await h.store.listChecks();
    const visit = (date: string) => rows.find((r) => r.check.dateOfService === date);
    expect(visit('2026-12-30')?.reusedFrom).toBe(visit('2026-12-28')?.correlationId);
  });

  it('reuses a completed result younger than the window for another appointment of the same coverage, as a chart pair of its own', async () => {
    clock = new Date('2026-11-23T12:00:00Z');
    // In front of the FHIR server: once told, it sends the next transaction on and loses the
    // answer, then refuses everything, as a crash between the chart write and the store step would.
    let fhirUrl = '';
    const proxy = { loseNext: false, down: false };
    const transactions: string[] = [];
    const chartHop = await startScriptedServer(async (req, res) => {
      if (proxy.down) return void res.socket?.destroy();
      const upstream = await fetch(`${fhirUrl}${req.url.replace(/^\/fhir/, '')}`, {
        method: req.method,
        headers: { accept: 'application/fhir+json', ...(req.body && { 'content-type': 'application/fhir+json' }), ...(req.headers.prefer && { prefer: String(req.headers.prefer) }) },
        ...(req.body && { body: req.body }),
      });
      const answer = await upstream.text();
      if (req.body.includes('"type":"transaction"')) transactions.push(req.body);
      if (proxy.loseNext && req.body.includes('"type":"transaction"')) {
        Object.assign(proxy, { loseNext: false, down: true });
        return void res.socket?.destroy();
      }
      res.writeHead(upstream.status, { 'content-type': 'application/fhir+json' }).end(answer);
    });
    closing.push(() => chartHop.close());
    h = await startHarness({ now: () => clock, fhirVia: async (url) => ((fhirUrl = url), `${chartHop.url}/fhir`) });
    const listener = new MllpListener({ handler: (m) => h.sync.receiveHl7(m) });
    const { port } = await listener.start();
    const booking = bookingsOf('P-7', '20261123090000');
    const c = await client(port);
    c.socket.write(frame(booking('F1', 'APT-F1', '20261210093000')));
    await c.waitFor(1);
    await until('first written', async () => (await h.store.listChecks({ states: ['written'] })).length === 1);
    const [firstRequest] = (await searchFhir(h.fhir, 'CoverageEligibilityRequest')) as CoverageEligibilityRequest[];

    proxy.loseNext = true;
    c.socket.write(frame(booking('F2', 'APT-F2', '20261214093000')));
    await c.waitFor(2);
    c.socket.end();
    await listener.stop();
    await until('the second written to the chart, its answer lost', async () => {
      const row = (await h.store.listChecks({ states: ['result-stored'] }))[0];
      return proxy.down && /chart write failed/.test(row?.lastError ?? '') && row;
    });
    await h.sync.stop();
    const sent = transactions.length;

    // Restarted a minute later: the check is written again, and finds its pair in the chart.
    proxy.down = false;
    clock = new Date('2026-11-23T12:01:00Z');
    const logger = createLogger({ level: 'silent' });
    const restarted = await startSyncInstance({ ...h, logger, now: () => clock, fhirVia: async () => `${chartHop.url}/fhir` });
    closing.unshift(() => restarted.close());
    await until('second written', async () => (await h.store.listChecks({ states: ['written'] })).length === 2);
    expect(transactions).toHaveLength(sent);
    expect(verificationPosts()).toBe(1);

    const rows = await h.store.listChecks();
    const first = rows.find((r) => r.check.dateOfService === '2026-12-10');
    const reused = rows.find((r) => r.check.dateOfService === '2026-12-14');
    expect(reused?.reusedFrom).toBe(first?.correlationId);
    expect(reused?.correlationId).toBeUndefined();
    const requests = (await searchFhir(h.fhir, 'CoverageEligibilityRequest')) as CoverageEligibilityRequest[];
    const appointmentOf = (r: CoverageEligibilityRequest | undefined) => r?.supportingInfo?.[0]?.information.identifier?.value;
    expect(requests.map((r) => [r.id, r.servicedDate, appointmentOf(r)]).sort()).toEqual(
      [
        [first?.written?.requestId, '2026-12-10', 'APT-F1'],
        [reused?.written?.requestId, '2026-12-14', 'APT-F2'],
      ].sort(),
    );
    // The first appointment's request is as it was before the second was booked.
    expect(requests.find((r) => r.id === firstRequest?.id)).toEqual(firstRequest);
    const responses = (await searchFhir(h.fhir, 'CoverageEligibilityResponse')) as CoverageEligibilityResponse[];
    expect(responses.map((r) => [r.id, r.request.reference]).sort()).toEqual(
      [
        [first?.written?.responseId, `CoverageEligibilityRequest/${first?.written?.requestId}`],
        [reused?.written?.responseId, `CoverageEligibilityRequest/${reused?.written?.requestId}`],
      ].sort(),
    );
    // Both answer the one verification.
    const correlationIds = responses.map((r) => r.identifier?.find((i) => i.system?.endsWith('/verification-correlation-id'))?.value);
    expect(correlationIds).toEqual([first?.correlationId, first?.correlationId]);
    // The reused one says where its result came from; the first says nothing of reuse.
    const reusedNote = `Reused: the result of verification ${first?.correlationId}, made for another appointment of the same coverage.`;
    expect(responses.find((r) => r.id === reused?.written?.responseId)?.disposition).toContain(reusedNote);
    expect(responses.find((r) => r.id === first?.written?.responseId)?.disposition).not.toContain('Reused');
  });
});
