import type { CoverageEligibilityResponse } from 'fhir/r4';
import { loadClinicRouting } from '../../src/adapters/clinic-routing';
import { loadHl7Mappings } from '../../src/adapters/hl7';
import { ingestHl7 } from '../../src/sync/ingest-hl7';
import { segment } from '../adapters/hl7/segment';
import { json } from '../support/http-server';
import { gate } from '../support/gate';
import { searchFhir, until } from './harness';
import { checkRow } from './job-store-contract';
import { resultBody, RIG_OPTIONS, startWorkerRig, type WorkerRig } from './worker-rig';
import type { CheckRow } from '../../src/sync/job-store';
import { retryAsRead } from '../../src/sync/operations';
import { scheduleAppointment } from '../../src/sync/schedule';
import { localCorrelationId } from '../../src/sync/schedule';
import { fhirWriter } from '../../src/sync/write-back';
import { toOutcome } from '../../src/verification/outcome';

/**
 * A check whose pair is on its way to the chart when its visit stops needing it (an S15, a FHIR
 * Appointment cancelled, an S13 move, an A40 merge: scheduleAppointment's withdrawal): the pair
 * reaches the chart all the same, and the check ends as one withdrawn once written does, naming
 * it, so that a plan dropped later ends its Coverage through it. On the real parts (worker-rig).
 */
let rig: WorkerRig;
afterEach(async () => {
  await rig.close();
});

const PATIENT = 'fhir|Patient/pat-ellen';
const { check: fixture } = checkRow('fixture');

/** The check `key` booked for its visit, by the appointment `appt-<key>`, as an ingest books it. */
async function book(key: string, status: 'booked' | 'cancelled' = 'booked', other?: string): Promise<void> {
  const checks = status === 'cancelled' ? [] : [{ ...fixture, idempotencyKey: other ?? key }];
  await rig.store.transaction((tx) =>
    scheduleAppointment(tx, { key: `appt-${key}`, patientKey: PATIENT, dateOfService: fixture.dateOfService, status, checks, basis: {} }, { now: new Date(), policy: RIG_OPTIONS.policy }),
  );
}

const responses = async () => (await searchFhir(rig.fhir, 'CoverageEligibilityResponse')) as CoverageEligibilityResponse[];
/** The responses written for the check `key` (its identifier), by id and version. */
const responsesOf = async (key: string) =>
  (await responses()).filter((r) => r.identifier?.some((i) => i.value === key)).map((r) => ({ id: r.id, version: r.meta?.versionId }));

/** The check once no worker has it in hand nor will take it again: done with. */
const settled = (key: string) =>
  until(`check ${key} settled`, async () => {
    const row = await rig.check(key);
    return row.dueAt === undefined && row.state !== 'result-stored' && row;
  }, 10_000);

/** A rig whose first chart write is held until the test opens `release`; `started` opens as it begins. */
async function heldWriteRig(body: string) {
  const started = gate();
  const release = gate();
  let writes = 0;
  rig = await startWorkerRig({
    answer: (_req, res) => json(res, 200, { ...(resultBody(body) as object), correlationId: `ver-${body}` }),
    writer: (chart) => ({
      async write(...args) {
        writes++;
        if (writes === 1) (started.open(), await release.opened);
        return chart.write(...args);
      },
    }),
  });
  return { started, release, writes: () => writes };
}

describe('a check withdrawn while its pair is on its way to the chart', () => {
  it.each([
    ['cancelled', 'the appointment was cancelled'],
    ['moved to another check', 'the appointment verifies another check'],
  ])('names the pair the chart took when its visit is %s meanwhile, as a check written before it', async (how) => {
    const held = await heldWriteRig('completed-minimal');
    await book('flying');
    rig.worker.start();
    await held.started.opened;
    await (how === 'cancelled' ? book('flying', 'cancelled') : book('flying', 'booked', 'flying-moved'));
    held.release.open();
    const row = await settled('flying');
    // Written once: the write in hand, not a second one for the withdrawal.
    const [response, ...more] = await responsesOf('flying');
    expect(more).toEqual([]);
    expect(row).toMatchObject({ state: 'written', written: { responseId: response?.id, verification: 'ver-completed-minimal' } });
    expect(held.writes()).toBe(how === 'cancelled' ? 1 : 2);
    expect(rig.errors).toEqual([]);
  });

  it('names the failure the chart took, withdrawn, and tells no person of it: its visit is cancelled', async () => {
    const held = await heldWriteRig('failed-patient-not-found');
    await book('failing');
    rig.worker.start();
    await held.started.opened;
    await book('failing', 'cancelled');
    held.release.open();
    const row = await settled('failing');
    const [response] = await responses();
    expect(row).toMatchObject({ state: 'cancelled', lastError: 'the appointment was cancelled', written: { responseId: response?.id } });
    expect(rig.events.filter((e) => e.name === 'needs-attention')).toEqual([]);
  });

  it('names the pair the chart took of a duplicate patient merged into another (A40) meanwhile, and writes the survivor\'s visit under the survivor', async () => {
    const held = await heldWriteRig('completed-minimal');
    const day = new Date(Date.now() + 17 * 86_400_000).toISOString().slice(0, 10);
    const msh = (type: string, id: string, at: string) => `MSH|^~\\&|SMILECLOUD|BSD-MAIN|ELIG|BSD|20261123${at}||${type}|${id}|P|2.5.1`;
    const pid = (patient: string) => `PID|1||${patient}^^^SC^MR||DOE^JANE||19800102|F`;
    const in1 = segment('IN1', { 1: '1', 3: '64246', 4: 'Guardian', 17: 'SEL', 36: 'SBX-COMPLETE' });
    const options = { mappings: loadHl7Mappings(), routing: loadClinicRouting(), now: () => new Date(), policy: RIG_OPTIONS.policy };
    await ingestHl7(rig.store, [msh('SIU^S12^SIU_S12', 'M1', '090000'), `SCH|APT-M1^SC||||||||||^^^${day.replace(/-/g, '')}093000`, pid('P-DUP'), in1].join('\r'), options);
    rig.worker.start();
    await held.started.opened;
    const [duplicate] = await rig.store.listChecks();
    const merged = await ingestHl7(rig.store, [msh('ADT^A40^ADT_A39', 'M2', '100000'), 'EVN|A40|20261123100000', pid('P-KEEP'), 'MRG|P-DUP^^^SC^MR'].join('\r'), options);
    expect(merged.withdrawn).toEqual([duplicate?.key]);
    held.release.open();
    const row = await settled(duplicate?.key ?? '');
    const [response, ...more] = await responsesOf(row.key);
    expect(more).toEqual([]);
    expect(row).toMatchObject({ state: 'written', written: { responseId: response?.id } });
    const [survivor] = merged.created;
    await until('the survivor written', async () => (await rig.check(survivor ?? '')).state === 'written', 10_000);
    expect(await responsesOf(survivor ?? '')).toHaveLength(1);
  });

  it('writes nothing for a check withdrawn while its result waited for a place to be written in: it is looked for, not written', async () => {
    // One chart place, held by the first check's write; the second's result comes meanwhile and waits for the place.
    const started = gate();
    const release = gate();
    let sent = 0;
    rig = await startWorkerRig({
      worker: { chartConcurrency: 1 },
      answer: (_req, res) => json(res, 200, { ...(resultBody('completed-minimal') as object), correlationId: `ver-${(sent += 1)}` }),
      writer: (chart) => ({
        find: chart.find?.bind(chart),
        async write(check, ...rest) {
          if (check.idempotencyKey === 'holding') (started.open(), await release.opened);
          return chart.write(check, ...rest);
        },
      }),
    });
    await book('holding');
    rig.worker.start();
    await started.opened;
    // Another plan of the patient's (another name on it): a verification of its own, not the first's taken.
    const queued = { ...fixture, idempotencyKey: 'queued', patient: { ...fixture.patient, firstName: 'Other' } };
    await rig.store.transaction((tx) =>
      scheduleAppointment(tx, { key: 'appt-queued', patientKey: PATIENT, dateOfService: fixture.dateOfService, status: 'booked', checks: [queued], basis: {} }, { now: new Date(), policy: RIG_OPTIONS.policy }),
    );
    rig.worker.kick();
    await rig.reach('queued', 'result-stored', 10_000);
    await book('queued', 'cancelled');
    release.open();
    const row = await settled('queued');
    expect(row.state).toBe('cancelled');
    expect(await responsesOf('queued')).toEqual([]);
    expect(await responsesOf('holding')).toHaveLength(1);
  });

  /** The check `key` booked with its result stored, the worker not started: its write to come. */
  async function resultStored(key: string): Promise<CheckRow> {
    rig = await startWorkerRig({ answer: (_req, res) => json(res, 500, {}) });
    await book(key);
    const result = { ...(resultBody('completed-minimal') as object), correlationId: `ver-${key}` };
    const row = { ...(await rig.check(key)), state: 'result-stored' as const, result, resultAt: new Date().toISOString(), correlationId: `ver-${key}` };
    await rig.store.transaction((tx) => tx.putCheck(row));
    return row;
  }

  it('finds the pair a process killed after its write left in the chart, and names it without writing it again', async () => {
    const row = await resultStored('killed');
    // The killed process's write reached the chart; its answer, and the store's record of it, never came.
    const chart = await fhirWriter(rig.fhir.url);
    const pair = await chart.write(row.check, toOutcome(row.result));
    const before = await responsesOf('killed');
    await book('killed', 'cancelled');
    rig.worker.start();
    const done = await settled('killed');
    expect(done).toMatchObject({ state: 'written', written: { requestId: pair.requestId, responseId: pair.responseId } });
    expect(before).toEqual([{ id: pair.responseId, version: expect.any(String) }]);
    expect(await responsesOf('killed')).toEqual(before);
    expect(rig.events.map((e) => e.name)).toEqual(['written']);
  });

  it('writes nothing for a visit cancelled while its result waited for the chart, none of it there', async () => {
    await resultStored('waiting');
    await book('waiting', 'cancelled');
    rig.worker.start();
    const done = await settled('waiting');
    expect(done).toMatchObject({ state: 'cancelled', lastError: 'the appointment was cancelled' });
    expect(done.written).toBeUndefined();
    expect(await responses()).toEqual([]);
  });

  it('sends no verification again, once the service is back, for a failure given up whose visit was cancelled on its way to the chart', async () => {
    const row = await resultStored('given-up');
    const failure = { correlationId: localCorrelationId(row.externalId), status: 'Failed', result: { type: 'https://dental-elig.dev/problems/NotVerified', title: 'Not verified' } };
    await rig.store.transaction((tx) => tx.putCheck({ ...row, result: failure, correlationId: failure.correlationId }));
    await book('given-up', 'cancelled');
    expect(await retryAsRead(rig.store, await rig.check('given-up'), new Date())).toBe(false);
    expect(await rig.check('given-up')).toMatchObject({ state: 'result-stored', round: 0 });
  });

  it('writes a result whose visit was cancelled and booked again before the worker took it', async () => {
    await resultStored('rebooked');
    await book('rebooked', 'cancelled');
    await book('rebooked');
    rig.worker.start();
    const done = await until('written', async () => {
      const row = await rig.check('rebooked');
      return row.state === 'written' && row;
    }, 10_000);
    const [response] = await responses();
    expect(done.written?.responseId).toBe(response?.id);
  });
});
