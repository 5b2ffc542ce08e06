import type { CoverageEligibilityResponse, FhirResource } from 'fhir/r4';
import { MAX_CHANGES } from '../../src/service/notifications';
import type { AppointmentRow } from '../../src/sync/job-store';
import { chartOf, searchFhir, startHarness, until, type Harness } from './harness';

/** A FHIR appointment on the chart's server → checks → the service → CoverageEligibilityResponses on the same server. */
describe('FHIR-triggered eligibility', () => {
  let h: Harness;
  beforeEach(async () => {
    h = await startHarness();
    await h.fhir.seed(chartOf('primary-secondary'));
  });
  afterEach(async () => h.close());

  it('verifies both coverages of a notified appointment and writes one response each into the chart', async () => {
    const written: string[] = [];
    h.sync.on('written', (e) => written.push(e.key));
    const res = await fetch(`${h.httpUrl}/fhir-notifications`, {
      method: 'POST',
      headers: { 'content-type': 'application/fhir+json' },
      body: JSON.stringify({ resourceType: 'Bundle', type: 'history', entry: [{ fullUrl: `${h.fhir.url}/Appointment/appt-4004` }] }),
    });
    expect(res.status).toBe(200);
    await until('two written checks', async () => written.length >= 2 && written);
    const responses = (await searchFhir(h.fhir, 'CoverageEligibilityResponse')) as CoverageEligibilityResponse[];
    expect(responses).toHaveLength(2);
    expect(responses.map((r) => r.outcome).sort()).toEqual(['complete', 'complete']);
    // The insurer is the chart's own Organization each Coverage's payor names, which a reader of the chart can follow.
    expect(responses.map((r) => `${r.insurance?.[0]?.coverage.reference} ${r.insurer.reference}`).sort()).toEqual([
      'Coverage/cov-marco-aetna Organization/org-aetna',
      'Coverage/cov-marco-delta Organization/org-delta-ca',
    ]);
    const checks = await h.store.listChecks();
    expect(checks.map((c) => c.state)).toEqual(['written', 'written']);
    // Both payers take asynchronous verification: the results came by webhook.
    expect(checks.map((c) => c.mode)).toEqual(['async', 'async']);

    // The same notification again: nothing new is verified or written.
    await fetch(`${h.httpUrl}/fhir-notifications/Appointment/appt-4004`, { method: 'POST' });
    await new Promise((r) => setTimeout(r, 300));
    expect(await searchFhir(h.fhir, 'CoverageEligibilityResponse')).toHaveLength(2);
    expect((await h.store.listChecks()).every((c) => c.round === 0)).toBe(true);
  });

  it('verifies again when the appointment is notified after its patient\'s birth date was corrected in the chart', async () => {
    await fetch(`${h.httpUrl}/fhir-notifications/Appointment/appt-4004`, { method: 'POST' });
    await until('both written', async () => (await h.store.listChecks({ states: ['written'] })).length === 2);
    const corrected = chartOf('primary-secondary').map((r) => (r.resourceType === 'Patient' && r.id === 'pat-marco' ? { ...r, birthDate: '1985-11-03' } : r));
    await h.fhir.seed(corrected.filter((r) => r.resourceType === 'Patient'));

    const res = await fetch(`${h.httpUrl}/fhir-notifications/Appointment/appt-4004`, { method: 'POST' });
    expect(res.status).toBe(200);
    await until('both verified again with the corrected birth date', async () => {
      const checks = await h.store.listChecks();
      return checks.length === 2 && checks.every((c) => c.round === 1 && c.state === 'written' && c.check.patient.birthDate === '1985-11-03') && checks;
    });
  });

  it('keeps what the chart got wrong that the checks go ahead without in the notification\'s record: a second patient in the slot', async () => {
    const family = chartOf('primary-secondary').flatMap((r) =>
      r.resourceType === 'Appointment' ? [{ ...r, participant: [...r.participant, { actor: { reference: 'Patient/another-child' }, status: 'accepted' as const }] }] : [],
    );
    await h.fhir.seed(family);
    await fetch(`${h.httpUrl}/fhir-notifications/Appointment/appt-4004`, { method: 'POST' });
    await until('both written', async () => (await h.store.listChecks({ states: ['written'] })).length === 2);
    const [notification] = await h.store.listMessages({ kind: 'fhir-notification' });
    expect(notification?.detail).toBe('booked: 2 checks; warnings: Appointment.participant: names 2 patients: only the first is verified; give each patient an appointment of their own');
  });

  it('refuses an appointment naming its patient by identifier only, saying so rather than that it names none', async () => {
    const byIdentifier = chartOf('primary-secondary').flatMap((r) =>
      r.resourceType === 'Appointment'
        ? [{ ...r, participant: r.participant.map((p) => (p.actor?.reference === 'Patient/pat-marco' ? { ...p, actor: { type: 'Patient', identifier: { system: 'urn:mrn', value: 'M-1' } } } : p)) }]
        : [],
    );
    await h.fhir.seed(byIdentifier);
    const res = await fetch(`${h.httpUrl}/fhir-notifications/Appointment/appt-4004`, { method: 'POST' });
    expect(res.status).toBe(422);
    expect(((await res.json()) as { issue: { diagnostics: string }[] }).issue[0]?.diagnostics).toBe(
      'Appointment/appt-4004: Appointment.participant: names its Patient by identifier only: give a reference (Patient/<id>) the chart can be read by',
    );
  });

  it('verifies an appointment naming a merged record as the patient it was merged into, writes it there, and reads it again when that patient\'s coverage changes', async () => {
    // The EHR merged a duplicate into Marco's record after the visit two weeks from now was booked under the duplicate.
    const visit = new Date(Date.now() + 14 * 86_400_000).toISOString().slice(0, 10);
    const duplicate = { resourceType: 'Patient' as const, id: 'pat-marco-dup', active: false, link: [{ other: { reference: 'Patient/pat-marco' }, type: 'replaced-by' as const }] };
    const booked = chartOf('primary-secondary').flatMap((r) =>
      r.resourceType === 'Appointment'
        ? [{ ...r, start: `${visit}T11:00:00-06:00`, end: `${visit}T12:00:00-06:00`, participant: r.participant.map((p) => (p.actor?.reference === 'Patient/pat-marco' ? { ...p, actor: { reference: 'Patient/pat-marco-dup' } } : p)) }]
        : [],
    );
    await h.fhir.seed([duplicate, ...booked]);
    const notify = async (path: string) => ((await (await fetch(`${h.httpUrl}/fhir-notifications${path}`, { method: 'POST' })).json()) as { issue: { diagnostics: string }[] }).issue[0]?.diagnostics;
    expect(await notify('/Appointment/appt-4004')).toBe('Appointment/appt-4004: booked');
    await until('both written', async () => (await h.store.listChecks({ states: ['written'] })).length === 2);
    const responses = (await searchFhir(h.fhir, 'CoverageEligibilityResponse')) as CoverageEligibilityResponse[];
    expect(responses.map((r) => r.patient.reference)).toEqual(['Patient/pat-marco', 'Patient/pat-marco']);
    // The coverages are the surviving record's: a change to one reads the appointment again.
    expect(await notify('/Coverage/cov-marco-aetna')).toBe('Coverage/cov-marco-aetna: Appointment/appt-4004: booked');
  });

  it('verifies a check under way at the service, its Coverage deleted and made again meanwhile, for the Coverage made', async () => {
    h.sandbox.injectFault({ method: 'POST', path: /^\/v2\/insurance-verification/, status: 503, times: Infinity });
    await fetch(`${h.httpUrl}/fhir-notifications/Appointment/appt-4004`, { method: 'POST' });
    await until('a send refused', async () => h.sandbox.requestLog.some((r) => r.method === 'POST' && r.status === 503));
    await h.fhir.repo.deleteResource('Coverage', 'cov-marco-delta');
    await h.fhir.seed(chartOf('primary-secondary').flatMap((r) => (r.resourceType === 'Coverage' && r.id === 'cov-marco-delta' ? [{ ...r, id: 'cov-marco-delta-2' }] : [])));
    const res = await fetch(`${h.httpUrl}/fhir-notifications/Coverage/cov-marco-delta-2`, { method: 'POST' });
    expect(res.status).toBe(200);
    expect((await h.store.listChecks()).map((c) => c.state).filter((s) => s === 'written')).toEqual([]);
    h.sandbox.clearFaults();
    await until('both written', async () => (await h.store.listChecks({ states: ['written'] })).length === 2);
    const responses = (await searchFhir(h.fhir, 'CoverageEligibilityResponse')) as CoverageEligibilityResponse[];
    expect(responses.map((r) => r.insurance?.[0]?.coverage.reference).sort()).toEqual(['Coverage/cov-marco-aetna', 'Coverage/cov-marco-delta-2']);
    expect((await h.store.listChecks()).every((c) => c.round === 0)).toBe(true);
  });

  describe('a patient\'s details or coverages changed under an appointment already booked', () => {
    // The visit two weeks from the day the test runs: only appointments from today on are read again.
    const visit = new Date(Date.now() + 14 * 86_400_000).toISOString().slice(0, 10);
    const chart = () => chartOf('primary-secondary').map((r) => (r.resourceType === 'Appointment' ? { ...r, start: `${visit}T11:00:00-06:00`, end: `${visit}T12:00:00-06:00` } : r));
    const notify = async (path: string, body?: object) => {
      const res = await fetch(`${h.httpUrl}/fhir-notifications${path}`, { method: 'POST', ...(body && { headers: { 'content-type': 'application/fhir+json' }, body: JSON.stringify(body) }) });
      return { status: res.status, said: ((await res.json()) as { issue: { diagnostics: string }[] }).issue[0]?.diagnostics };
    };
    const rounds = async () => (await h.store.listChecks()).map((c) => [c.check.coverage.order, c.round, c.state, c.check.subscriber.memberId]).sort();
    beforeEach(async () => {
      await h.fhir.seed(chart());
      await notify('/Appointment/appt-4004');
      await until('both written', async () => (await h.store.listChecks({ states: ['written'] })).length === 2);
    });

    it('verifies again the coverage whose member id the chart corrected, told of the Coverage alone', async () => {
      const corrected = chart().flatMap((r) => (r.resourceType === 'Coverage' && r.id === 'cov-marco-aetna' ? [{ ...r, subscriberId: 'W778899002' }] : []));
      await h.fhir.seed(corrected);
      expect(await notify('/Coverage/cov-marco-aetna')).toEqual({ status: 200, said: 'Coverage/cov-marco-aetna: Appointment/appt-4004: booked' });
      // A member id is part of the check's key: the corrected coverage is a check of its own, verified and written.
      await until('the corrected coverage written', async () => (await h.store.listChecks({ states: ['written'] })).some((c) => c.check.subscriber.memberId === 'W778899002'));
      const [appointment] = await h.store.listAppointments('booked');
      const held = (await h.store.listChecks()).filter((c) => appointment?.checkKeys.includes(c.key));
      expect(held.map((c) => [c.check.coverage.order, c.state, c.check.subscriber.memberId]).sort()).toEqual([
        ['primary', 'written', 'DD7654321'],
        ['secondary', 'written', 'W778899002'],
      ]);
      expect(h.sandbox.requestLog.filter((r) => r.method === 'POST' && r.path.includes('insurance-verification'))).toHaveLength(3);
    });

    it('writes the pair again naming the Organization a Coverage\'s payor now references, verifying nothing again', async () => {
      // The EHR moves the plan to another Organization of the same payer (two merged, the old one to be deleted).
      const delta = chart().find((r) => r.resourceType === 'Organization' && r.id === 'org-delta-ca') as FhirResource;
      const moved = chart().flatMap((r) => (r.resourceType === 'Coverage' && r.id === 'cov-marco-delta' ? [{ ...r, payor: [{ reference: 'Organization/org-delta-2' }] }] : []));
      await h.fhir.seed([{ ...delta, id: 'org-delta-2' }, ...moved]);
      expect(await notify('/Coverage/cov-marco-delta')).toEqual({ status: 200, said: 'Coverage/cov-marco-delta: Appointment/appt-4004: booked' });
      const insurers = async () => ((await searchFhir(h.fhir, 'CoverageEligibilityResponse')) as CoverageEligibilityResponse[]).map((r) => `${r.insurance?.[0]?.coverage.reference} ${r.insurer.reference}`).sort();
      await until('the pair names the new Organization', async () => (await insurers()).includes('Coverage/cov-marco-delta Organization/org-delta-2'));
      expect(await insurers()).toEqual(['Coverage/cov-marco-aetna Organization/org-aetna', 'Coverage/cov-marco-delta Organization/org-delta-2']);
      expect((await h.store.listChecks()).map((c) => [c.round, c.check.source.kind === 'fhir' && c.check.source.insurer])).toEqual(expect.arrayContaining([[0, 'Organization/org-delta-2']]));
      expect(h.sandbox.requestLog.filter((r) => r.method === 'POST' && r.path.includes('insurance-verification'))).toHaveLength(2);
    });

    describe('a Coverage the chart deleted and made again, the same plan under a new id', () => {
      const remade = () => chart().flatMap((r) => (r.resourceType === 'Coverage' && r.id === 'cov-marco-delta' ? [{ ...r, id: 'cov-marco-delta-2' }] : []));
      const named = async () => ((await searchFhir(h.fhir, 'CoverageEligibilityResponse')) as CoverageEligibilityResponse[]).map((r) => `${r.id} ${r.insurance?.[0]?.coverage.reference}`).sort();
      const sources = async () => (await h.store.listChecks()).map((c) => [c.round, c.state, c.check.source.kind === 'fhir' && c.check.source.coverage]).sort();

      it('writes the pair again naming the Coverage made, in place of the one naming the Coverage deleted, verifying nothing again', async () => {
        const before = await named();
        const deltaResponse = before.find((r) => r.endsWith('Coverage/cov-marco-delta'))?.split(' ')[0];
        await h.fhir.repo.deleteResource('Coverage', 'cov-marco-delta');
        await h.fhir.seed(remade());
        expect(await notify('/Coverage/cov-marco-delta')).toEqual({ status: 200, said: 'Coverage/cov-marco-delta: the server no longer has it; Appointment/appt-4004: booked' });
        await until('the pair names the Coverage made', async () => (await named()).includes(`${deltaResponse} Coverage/cov-marco-delta-2`));
        expect(await named()).toEqual(before.map((r) => r.replace(/Coverage\/cov-marco-delta$/, 'Coverage/cov-marco-delta-2')).sort());
        expect(await sources()).toEqual([
          [0, 'written', 'Coverage/cov-marco-aetna'],
          [0, 'written', 'Coverage/cov-marco-delta-2'],
        ]);
        expect(h.sandbox.requestLog.filter((r) => r.method === 'POST' && r.path.includes('insurance-verification'))).toHaveLength(2);
        // Read again, as the poll does: nothing more to do.
        expect(await notify('/Coverage/cov-marco-delta-2')).toEqual({ status: 200, said: 'Coverage/cov-marco-delta-2: Appointment/appt-4004: booked' });
        expect((await h.store.listMessages({ kind: 'fhir-notification' })).map((m) => m.detail)).toEqual(['booked: 2 checks', 'booked: 2 checks']);
      });

      it('does the same when a poll finds the Coverage made', async () => {
        await h.sync.pollAppointments();
        await h.fhir.repo.deleteResource('Coverage', 'cov-marco-delta');
        await h.fhir.seed(remade());
        expect(await h.sync.pollAppointments()).toBeGreaterThan(0);
        await until('the pair names the Coverage made', async () => (await named()).some((r) => r.endsWith('Coverage/cov-marco-delta-2')) && (await sources()).every(([, state]) => state === 'written'));
        expect((await named()).map((r) => r.split(' ')[1]).sort()).toEqual(['Coverage/cov-marco-aetna', 'Coverage/cov-marco-delta-2']);
        expect(h.sandbox.requestLog.filter((r) => r.method === 'POST' && r.path.includes('insurance-verification'))).toHaveLength(2);
      });

      it('does the same when the chart is read between the deletion and the making, told of each', async () => {
        await h.fhir.repo.deleteResource('Coverage', 'cov-marco-delta');
        expect(await notify('/Coverage/cov-marco-delta')).toEqual({ status: 200, said: 'Coverage/cov-marco-delta: the server no longer has it; Appointment/appt-4004: booked' });
        await h.fhir.seed(remade());
        expect(await notify('/Coverage/cov-marco-delta-2')).toEqual({ status: 200, said: 'Coverage/cov-marco-delta-2: Appointment/appt-4004: booked' });
        await until('both written', async () => (await sources()).every(([, state]) => state === 'written') && (await named()).some((r) => r.endsWith('Coverage/cov-marco-delta-2')));
        expect(await sources()).toEqual([
          [0, 'written', 'Coverage/cov-marco-aetna'],
          [0, 'written', 'Coverage/cov-marco-delta-2'],
        ]);
        expect((await named()).map((r) => r.split(' ')[1]).sort()).toEqual(['Coverage/cov-marco-aetna', 'Coverage/cov-marco-delta-2']);
        expect(h.sandbox.requestLog.filter((r) => r.method === 'POST' && r.path.includes('insurance-verification'))).toHaveLength(2);
      });

      it('takes an appointment a version whose read held no Coverage reference stored as changed once, verifying and writing nothing again', async () => {
        // What that version kept as the read it stored the appointment by: each check's chart Coverage without the Coverage itself.
        const [stored] = await h.store.listAppointments('booked');
        const read = (stored?.basis as { read: string }).read;
        const before = read.replaceAll(/,"Coverage\/[^"]+"\]/g, ']');
        expect(before).not.toBe(read);
        await h.store.transaction((tx) => tx.putAppointment({ ...(stored as AppointmentRow), basis: { ...(stored?.basis as object), read: before } }));
        const checks = await h.store.listChecks();
        const versions = async () => ((await searchFhir(h.fhir, 'CoverageEligibilityResponse')) as CoverageEligibilityResponse[]).map((r) => `${r.id} ${r.meta?.versionId}`).sort();
        const written = await versions();

        expect(await notify('/Appointment/appt-4004')).toEqual({ status: 200, said: 'Appointment/appt-4004: booked' });
        expect(((await h.store.listAppointments('booked'))[0]?.basis as { read: string }).read).toBe(read);
        expect((await h.store.listMessages({ kind: 'fhir-notification' })).map((m) => m.detail)).toEqual(['booked: 2 checks', 'booked: 2 checks']);
        expect(await h.store.listChecks()).toEqual(checks);
        // Once: read again, it is a duplicate.
        expect(await notify('/Appointment/appt-4004')).toEqual({ status: 200, said: 'Appointment/appt-4004: booked' });
        expect(await h.store.listMessages({ kind: 'fhir-notification' })).toHaveLength(2);
        expect(await versions()).toEqual(written);
        expect(h.sandbox.requestLog.filter((r) => r.method === 'POST' && r.path.includes('insurance-verification'))).toHaveLength(2);
      });
    });

    describe('a correction the chart puts back', () => {
      it('verifies again with the birth date the chart restored after correcting it, and once only', async () => {
        const bornOn = (birthDate: string | undefined) => chart().flatMap((r) => (r.resourceType === 'Patient' ? [{ ...r, birthDate }] : []));
        const restored = (chart().find((r) => r.resourceType === 'Patient') as { birthDate?: string }).birthDate;
        const verified = async () => (await h.store.listChecks()).map((c) => [c.round, c.state, c.check.patient.birthDate]);
        const said = { status: 200, said: 'Patient/pat-marco: Appointment/appt-4004: booked' };
        await h.fhir.seed(bornOn('1985-11-03'));
        expect(await notify('/Patient/pat-marco')).toEqual(said);
        await until('verified with the correction', async () => (await verified()).every(([round, state]) => round === 1 && state === 'written'));
        await h.fhir.seed(bornOn(restored));
        expect(await notify('/Patient/pat-marco')).toEqual(said);
        // The new round is made while the notification is read; verified and written after.
        expect((await verified()).map(([round, , birthDate]) => [round, birthDate])).toEqual([
          [2, restored],
          [2, restored],
        ]);
        await until('verified again with the birth date restored', async () => (await verified()).every(([round, state]) => round === 2 && state === 'written'));
        // Sent again, and polled: what the store holds already.
        expect(await notify('/Patient/pat-marco')).toEqual(said);
        expect(await h.sync.pollAppointments()).toBeGreaterThan(0);
        expect(await verified()).toEqual([
          [2, 'written', restored],
          [2, 'written', restored],
        ]);
        expect((await h.store.listMessages({ kind: 'fhir-notification' })).map((m) => m.status)).toEqual(['handled', 'handled', 'handled']);
        expect(h.sandbox.requestLog.filter((r) => r.method === 'POST' && r.path.includes('insurance-verification'))).toHaveLength(6);
      });

      it('writes the pair again naming the payor Organization the chart moved the Coverage back to', async () => {
        const delta = chart().find((r) => r.resourceType === 'Organization' && r.id === 'org-delta-ca') as FhirResource;
        const paidBy = (org: string) => chart().flatMap((r) => (r.resourceType === 'Coverage' && r.id === 'cov-marco-delta' ? [{ ...r, payor: [{ reference: `Organization/${org}` }] }] : []));
        const insurers = async () => ((await searchFhir(h.fhir, 'CoverageEligibilityResponse')) as CoverageEligibilityResponse[]).map((r) => `${r.insurance?.[0]?.coverage.reference} ${r.insurer.reference}`).sort();
        await h.fhir.seed([{ ...delta, id: 'org-delta-2' }, ...paidBy('org-delta-2')]);
        expect(await notify('/Coverage/cov-marco-delta')).toEqual({ status: 200, said: 'Coverage/cov-marco-delta: Appointment/appt-4004: booked' });
        await until('the pair names the new Organization', async () => (await insurers()).includes('Coverage/cov-marco-delta Organization/org-delta-2'));
        await h.fhir.seed(paidBy('org-delta-ca'));
        expect(await notify('/Coverage/cov-marco-delta')).toEqual({ status: 200, said: 'Coverage/cov-marco-delta: Appointment/appt-4004: booked' });
        await until('the pair names the first Organization again', async () => (await insurers()).includes('Coverage/cov-marco-delta Organization/org-delta-ca'));
        expect(await insurers()).toEqual(['Coverage/cov-marco-aetna Organization/org-aetna', 'Coverage/cov-marco-delta Organization/org-delta-ca']);
        expect(h.sandbox.requestLog.filter((r) => r.method === 'POST' && r.path.includes('insurance-verification'))).toHaveLength(2);
      });
    });

    it('reads the patient\'s appointments again on a Patient notification, full-resource or in a backport Bundle, and changes nothing when nothing changed', async () => {
      const patient = chart().find((r) => r.resourceType === 'Patient');
      expect(await notify('', patient)).toEqual({ status: 200, said: 'Patient/pat-marco: Appointment/appt-4004: booked' });
      expect(await notify('', { resourceType: 'Bundle', type: 'history', entry: [{ fullUrl: `${h.fhir.url}/Coverage/cov-marco-delta` }] })).toEqual({
        status: 200,
        said: 'Coverage/cov-marco-delta: Appointment/appt-4004: booked',
      });
      await new Promise((r) => setTimeout(r, 300));
      expect(await rounds()).toEqual([
        ['primary', 0, 'written', 'DD7654321'],
        ['secondary', 0, 'written', 'W778899001'],
      ]);
      // Each read of an unchanged appointment is a duplicate: nothing more is kept than the first notification.
      expect((await h.store.listMessages({ kind: 'fhir-notification' })).map((m) => m.status)).toEqual(['handled']);
    });

    it('finds by polling a Coverage the chart changed since the last poll, and reads nothing again after', async () => {
      expect(await h.sync.pollAppointments()).toBeGreaterThan(0);
      expect(await h.sync.pollAppointments()).toBe(0);
      await h.fhir.seed(chart().flatMap((r) => (r.resourceType === 'Coverage' && r.id === 'cov-marco-aetna' ? [{ ...r, subscriberId: 'W778899002' }] : [])));
      expect(await h.sync.pollAppointments()).toBe(1);
      await until('the corrected coverage written', async () => (await h.store.listChecks({ states: ['written'] })).some((c) => c.check.subscriber.memberId === 'W778899002'));
      expect(await h.sync.pollAppointments()).toBe(0);
    });

    it('reads an appointment a notification names with its Patient once, and finds a patient by a versioned reference', async () => {
      const both = { resourceType: 'Bundle', type: 'history', entry: [{ fullUrl: `${h.fhir.url}/Appointment/appt-4004/_history/1` }, { fullUrl: `${h.fhir.url}/Patient/pat-marco` }] };
      expect(await notify('', both)).toEqual({ status: 200, said: 'Appointment/appt-4004: booked; Patient/pat-marco: Appointment/appt-4004: read above' });
      // A Coverage whose beneficiary is a versioned reference is the same patient's.
      const versioned = chart().flatMap((r) => (r.resourceType === 'Coverage' && r.id === 'cov-marco-delta' ? [{ ...r, beneficiary: { reference: 'Patient/pat-marco/_history/1' } }] : []));
      await h.fhir.seed(versioned);
      expect(await notify('/Coverage/cov-marco-delta')).toEqual({ status: 200, said: 'Coverage/cov-marco-delta: Appointment/appt-4004: booked' });
    });

    it('reads again the appointments whose checks verify a Coverage the chart deleted, so they no longer hold it', async () => {
      await h.fhir.repo.deleteResource('Coverage', 'cov-marco-aetna');
      expect(await notify('/Coverage/cov-marco-aetna')).toEqual({ status: 200, said: 'Coverage/cov-marco-aetna: the server no longer has it; Appointment/appt-4004: booked' });
      const [appointment] = await h.store.listAppointments('booked');
      const held = (await h.store.listChecks()).filter((c) => appointment?.checkKeys.includes(c.key));
      expect(held.map((c) => (c.check.source.kind === 'fhir' ? c.check.source.coverage : undefined))).toEqual(['Coverage/cov-marco-delta']);
    });

    describe('a Coverage the chart moves to another patient', () => {
      const lucia = [
        { resourceType: 'Patient', id: 'pat-lucia', identifier: [{ system: 'urn:oid:2.16.840.1.113883.3.9999.2', value: 'MRN-100311' }], name: [{ family: 'Alvarez', given: ['Lucia'] }], gender: 'female', birthDate: '2015-06-01' },
        { resourceType: 'Appointment', id: 'appt-5005', status: 'booked', start: `${visit}T14:00:00-06:00`, end: `${visit}T15:00:00-06:00`, participant: [{ actor: { reference: 'Patient/pat-lucia' }, status: 'accepted' }, { actor: { reference: 'Practitioner/prac-chen' }, status: 'accepted' }, { actor: { reference: 'Location/bright-smiles-main' }, status: 'accepted' }] },
      ] as FhirResource[];
      // The front desk filed the Aetna plan under Marco; it is his daughter's.
      const moved = () => chart().flatMap((r) => (r.resourceType === 'Coverage' && r.id === 'cov-marco-aetna' ? [{ ...r, beneficiary: { reference: 'Patient/pat-lucia' }, relationship: { coding: [{ system: 'http://terminology.hl7.org/CodeSystem/subscriber-relationship', code: 'child' }] }, order: 1 }] : []));
      const heldBy = async () => {
        const checks = await h.store.listChecks();
        return Object.fromEntries((await h.store.listAppointments()).map((a) => [a.key, [a.status, ...a.checkKeys.map((k) => checks.find((c) => c.key === k)?.check.source).map((s) => (s?.kind === 'fhir' ? s.coverage : undefined))]]));
      };
      beforeEach(async () => {
        await h.fhir.seed(lucia);
        expect(await notify('/Appointment/appt-5005')).toEqual({ status: 200, said: 'Appointment/appt-5005: awaiting-insurance' });
      });

      it('leaves the first patient\'s appointment and verifies the second\'s, told of the Coverage', async () => {
        await h.fhir.seed(moved());
        expect(await notify('/Coverage/cov-marco-aetna')).toEqual({ status: 200, said: 'Coverage/cov-marco-aetna: Appointment/appt-5005: booked, Appointment/appt-4004: booked' });
        await until('Lucia\'s written', async () => (await h.store.listChecks({ states: ['written'] })).some((c) => c.check.patient.firstName === 'Lucia'));
        expect(await heldBy()).toEqual({
          'fhir|Appointment/appt-4004': ['booked', 'Coverage/cov-marco-delta'],
          'fhir|Appointment/appt-5005': ['booked', 'Coverage/cov-marco-aetna'],
        });
      });

      it('does the same when a poll finds the Coverage changed', async () => {
        await h.sync.pollAppointments();
        await h.fhir.seed(moved());
        // Only the Coverage changed since: Marco's appointment is read again for it, not for a change of its own.
        expect(await h.sync.pollAppointments()).toBe(2);
        await until('Lucia\'s written', async () => (await h.store.listChecks({ states: ['written'] })).some((c) => c.check.patient.firstName === 'Lucia'));
        expect(await heldBy()).toEqual({
          'fhir|Appointment/appt-4004': ['booked', 'Coverage/cov-marco-delta'],
          'fhir|Appointment/appt-5005': ['booked', 'Coverage/cov-marco-aetna'],
        });
      });
    });

    describe('a patient who is the subscriber of another patient\'s Coverage', () => {
      // Lucia is on her father's plan: her check names Marco, as subscriber, by his name and birth date.
      const lucia = [
        { resourceType: 'Patient', id: 'pat-lucia', name: [{ family: 'Alvarez', given: ['Lucia'] }], gender: 'female', birthDate: '2015-06-01' },
        { resourceType: 'Coverage', id: 'cov-lucia-delta', status: 'active', subscriber: { reference: 'Patient/pat-marco' }, subscriberId: 'DD7654321', beneficiary: { reference: 'Patient/pat-lucia' }, relationship: { coding: [{ system: 'http://terminology.hl7.org/CodeSystem/subscriber-relationship', code: 'child' }] }, payor: [{ reference: 'Organization/org-delta-ca' }], order: 1 },
        { resourceType: 'Appointment', id: 'appt-5005', status: 'booked', start: `${visit}T14:00:00-06:00`, end: `${visit}T15:00:00-06:00`, participant: [{ actor: { reference: 'Patient/pat-lucia' }, status: 'accepted' }, { actor: { reference: 'Location/bright-smiles-main' }, status: 'accepted' }] },
      ] as FhirResource[];
      const corrected = () => chart().flatMap((r) => (r.resourceType === 'Patient' ? [{ ...r, birthDate: '1985-11-03' }] : []));
      const luciaSubscriber = async () => (await h.store.listChecks({ states: ['written'] })).filter((c) => c.check.patient.firstName === 'Lucia').map((c) => [c.round, c.check.subscriber.birthDate]);
      beforeEach(async () => {
        await h.fhir.seed(lucia);
        expect(await notify('/Appointment/appt-5005')).toEqual({ status: 200, said: 'Appointment/appt-5005: booked' });
        await until('Lucia\'s written', async () => (await luciaSubscriber()).length === 1);
      });

      it('verifies again the dependent\'s appointment when the subscriber\'s birth date is corrected, told of the Patient', async () => {
        await h.fhir.seed(corrected());
        expect(await notify('/Patient/pat-marco')).toEqual({ status: 200, said: 'Patient/pat-marco: Appointment/appt-4004: booked, Appointment/appt-5005: booked' });
        await until('Lucia\'s verified again', async () => (await luciaSubscriber())[0]?.[0] === 1);
        expect(await luciaSubscriber()).toEqual([[1, '1985-11-03']]);
      });

      it('does the same when a poll finds the Patient changed', async () => {
        await h.sync.pollAppointments();
        await h.fhir.seed(corrected());
        expect(await h.sync.pollAppointments()).toBe(2);
        await until('Lucia\'s verified again', async () => (await luciaSubscriber())[0]?.[0] === 1);
        expect(await luciaSubscriber()).toEqual([[1, '1985-11-03']]);
      });
    });

    describe('a subscriber kept as a RelatedPerson (Marco\'s Aetna plan is Sofia\'s)', () => {
      const corrected = () => chart().flatMap((r) => (r.resourceType === 'RelatedPerson' ? [{ ...r, birthDate: '1987-04-19' }] : []));
      const subscribers = async () => (await h.store.listChecks()).map((c) => [c.check.coverage.order, c.round, c.check.subscriber.birthDate]).sort();

      it('verifies again the plan she subscribes when her birth date is corrected, told of the RelatedPerson', async () => {
        await h.fhir.seed(corrected());
        expect(await notify('/RelatedPerson/rp-sofia')).toEqual({ status: 200, said: 'RelatedPerson/rp-sofia: Appointment/appt-4004: booked' });
        expect(await subscribers()).toEqual([
          ['primary', 0, '1985-11-30'],
          ['secondary', 1, '1987-04-19'],
        ]);
        // A full-resource notification of one no Coverage names as subscriber reads nothing.
        expect(await notify('', { resourceType: 'RelatedPerson', id: 'rp-nobody' })).toEqual({ status: 200, said: 'RelatedPerson/rp-nobody: no appointment verifying a Coverage it is the subscriber of held from today on' });
      });

      it('does the same when a poll finds the RelatedPerson changed, and reads nothing again after', async () => {
        await h.sync.pollAppointments();
        expect(await h.sync.pollAppointments()).toBe(0);
        await h.fhir.seed(corrected());
        expect(await h.sync.pollAppointments()).toBe(1);
        expect(await subscribers()).toEqual([
          ['primary', 0, '1985-11-30'],
          ['secondary', 1, '1987-04-19'],
        ]);
        expect(await h.sync.pollAppointments()).toBe(0);
      });
    });

    it('says so of a Coverage the server no longer has or a patient with no appointment held, and refuses another type', async () => {
      expect(await notify('/Coverage/cov-gone')).toEqual({ status: 200, said: 'Coverage/cov-gone: the server no longer has it' });
      expect(await notify('/Coverage/cov-other-patient')).toEqual({ status: 200, said: 'Coverage/cov-other-patient: no appointment of Patient/pat-someone-else held from today on' });
      expect(await notify('', { resourceType: 'Observation', id: 'obs-1' })).toEqual({ status: 400, said: 'resourceType Observation is not Appointment, Patient, Coverage or RelatedPerson' });
    });

    it('refuses a notification naming an id R4 does not allow, as a mistake of the sender, not a chart to be tried again', async () => {
      const refused = { status: 400, said: 'Appointment.id is not an R4 id (1 to 64 of A-Z, a-z, 0-9, - and ., not . or ..)' };
      expect(await notify('', { resourceType: 'Appointment', id: '..' })).toEqual(refused);
      expect(await notify('', { resourceType: 'Bundle', type: 'history', entry: [{ resource: { resourceType: 'Appointment', id: 'appt 4004' } }] })).toEqual(refused);
      expect(await notify('', { resourceType: 'Bundle', type: 'history', entry: [{ fullUrl: `${h.fhir.url}/Appointment/.` }] })).toEqual(refused);
      // Named in the path, as id-only senders do, it is no heartbeat: answered 200 and polled, the letter was lost.
      expect(await notify('/Appointment/appt_4004!')).toEqual(refused);
      expect(await notify(`/Appointment/${'a'.repeat(65)}`)).toEqual(refused);
      // A trailing slash had the path name nothing: a heartbeat again.
      expect(await notify('/Appointment/appt_4004!/')).toEqual(refused);
      expect((await h.store.listMessages({ status: 'dead' })).length).toBe(6);
    });

    it('names where a Bundle or a resource it cannot read is wrong, not its resourceType', async () => {
      expect(await notify('', { resourceType: 'Bundle', type: 'history', entry: { fullUrl: `${h.fhir.url}/Appointment/appt-4004` } })).toEqual({ status: 400, said: 'Bundle.entry: Invalid input: expected array, received object' });
      expect(await notify('', { resourceType: 'Bundle', type: 'history', entry: [{ resource: { id: 'appt-4004' } }] })).toEqual({ status: 400, said: 'Bundle.entry[0].resource.resourceType: Invalid input: expected string, received undefined' });
      // An id that is a number was refused as a body with no resourceType, the one field it has right.
      expect(await notify('', { resourceType: 'Appointment', id: 4004 })).toEqual({ status: 400, said: 'Appointment.id: Invalid input: expected string, received number' });
      // The Bundle's own id is not read: its entries are.
      expect(await notify('', { resourceType: 'Bundle', id: 7, type: 'history', entry: [{ fullUrl: `${h.fhir.url}/Appointment/.` }] })).toEqual({ status: 400, said: 'Appointment.id is not an R4 id (1 to 64 of A-Z, a-z, 0-9, - and ., not . or ..)' });
    });

    it('names in its answer\'s expression the resource types the notification told of', async () => {
      const told = async (path: string, body?: object) => {
        const res = await fetch(`${h.httpUrl}/fhir-notifications${path}`, { method: 'POST', ...(body && { headers: { 'content-type': 'application/fhir+json' }, body: JSON.stringify(body) }) });
        return ((await res.json()) as { issue: { expression?: string[] }[] }).issue[0]?.expression;
      };
      expect(await told('/Coverage/cov-marco-aetna')).toEqual(['Coverage']);
      expect(await told('', { resourceType: 'Bundle', type: 'history', entry: [{ fullUrl: `${h.fhir.url}/Coverage/cov-marco-delta` }, { fullUrl: `${h.fhir.url}/Patient/pat-marco` }] })).toEqual(['Patient', 'Coverage']);
      expect(await told('/Appointment/appt-4004')).toEqual(['Appointment']);
      expect(await told('/Patient/pat-marco/')).toEqual(['Patient']);
      // Nothing read: an answer about the body itself names no resource.
      expect(await told('', { resourceType: 'Observation', id: 'obs-1' })).toBeUndefined();
    });
  });

  describe('an appointment refused for its data, the chart correcting it after', () => {
    const visit = new Date(Date.now() + 14 * 86_400_000).toISOString().slice(0, 10);
    const chart = (memberId?: string) =>
      chartOf('primary-secondary').map((r) => {
        if (r.resourceType === 'Appointment') return { ...r, start: `${visit}T11:00:00-06:00`, end: `${visit}T12:00:00-06:00` };
        if (r.resourceType !== 'Coverage' || r.id !== 'cov-marco-aetna') return r;
        const { subscriberId: _, ...withoutMemberId } = r;
        return memberId === undefined ? withoutMemberId : { ...r, subscriberId: memberId };
      });
    const corrected = () => chart('W778899002').filter((r) => r.resourceType === 'Coverage');
    const letters = async () => (await h.store.listMessages({ kind: 'fhir-notification' })).filter((m) => m.detail?.startsWith('Appointment/appt-4004: ')).map((m) => m.status);

    it('reads it again when the Coverage is corrected, verifies both, and lets go of its dead letter', async () => {
      await h.fhir.seed(chart());
      const refused = await fetch(`${h.httpUrl}/fhir-notifications/Appointment/appt-4004`, { method: 'POST' });
      expect(refused.status).toBe(422);
      expect(await letters()).toEqual(['dead']);

      await h.fhir.seed(corrected());
      const res = await fetch(`${h.httpUrl}/fhir-notifications/Coverage/cov-marco-aetna`, { method: 'POST' });
      expect(((await res.json()) as { issue: { diagnostics: string }[] }).issue[0]?.diagnostics).toBe('Coverage/cov-marco-aetna: Appointment/appt-4004: booked');
      await until('both written', async () => (await h.store.listChecks({ states: ['written'] })).length === 2);
      expect(await letters()).toEqual(['handled']);
      const [letter] = (await h.store.listMessages({ kind: 'fhir-notification' })).filter((m) => m.detail?.startsWith('Appointment/appt-4004: '));
      expect(letter?.detail).toMatch(/; handled when read again at \d{4}-\d\d-\d\dT/);
    });

    it('lets go of its dead letter when the chart puts back what it had when the appointment was handled: read again, it is a duplicate', async () => {
      await h.fhir.seed(chart('W778899002'));
      const notify = () => fetch(`${h.httpUrl}/fhir-notifications/Appointment/appt-4004`, { method: 'POST' });
      expect((await notify()).status).toBe(200);
      await until('both written', async () => (await h.store.listChecks({ states: ['written'] })).length === 2);
      // The member id deleted by mistake, then typed back in.
      await h.fhir.seed(chart().filter((r) => r.resourceType === 'Coverage'));
      expect((await notify()).status).toBe(422);
      expect(await letters()).toEqual(['dead']);
      await h.fhir.seed(corrected());
      expect((await notify()).status).toBe(200);
      expect(await letters()).toEqual(['handled']);
    });

    it("lets go of a Coverage's letter once the Coverage is read again and handled, though its patient has no appointment to read", async () => {
      const coverage = chart('W778899002').flatMap((r) => (r.resourceType === 'Coverage' && r.id === 'cov-marco-aetna' ? [r] : []));
      await h.fhir.seed(coverage.map(({ beneficiary: _, ...r }) => r as FhirResource));
      const notify = () => fetch(`${h.httpUrl}/fhir-notifications/Coverage/cov-marco-aetna`, { method: 'POST' });
      expect((await notify()).status).toBe(422);
      const coverageLetters = async () => (await h.store.listMessages({ kind: 'fhir-notification' })).filter((m) => m.detail?.startsWith('Coverage/cov-marco-aetna: ')).map((m) => m.status);
      expect(await coverageLetters()).toEqual(['dead']);
      await h.fhir.seed(coverage);
      const res = await notify();
      expect(((await res.json()) as { issue: { diagnostics: string }[] }).issue[0]?.diagnostics).toBe('Coverage/cov-marco-aetna: no appointment of Patient/pat-marco held from today on');
      expect(await coverageLetters()).toEqual(['handled']);
    });

    describe('for a birth date of its subscriber kept as a RelatedPerson (Sofia, whose plan covers Marco), typed a year ahead', () => {
      const sofia = (birthDate: string) => chart('W778899002').flatMap((r) => (r.resourceType === 'RelatedPerson' ? [{ ...r, birthDate }] : []));
      beforeEach(async () => {
        await h.fhir.seed([...chart('W778899002'), ...sofia(`${Number(visit.slice(0, 4)) + 1}-04-09`)]);
        expect((await fetch(`${h.httpUrl}/fhir-notifications/Appointment/appt-4004`, { method: 'POST' })).status).toBe(422);
        expect(await letters()).toEqual(['dead']);
      });

      it('reads it again when the RelatedPerson is corrected, verifies both, and lets go of its dead letter', async () => {
        await h.fhir.seed(sofia('1987-04-09'));
        const res = await fetch(`${h.httpUrl}/fhir-notifications/RelatedPerson/rp-sofia`, { method: 'POST' });
        expect(((await res.json()) as { issue: { diagnostics: string }[] }).issue[0]?.diagnostics).toBe('RelatedPerson/rp-sofia: Appointment/appt-4004: booked');
        await until('both written', async () => (await h.store.listChecks({ states: ['written'] })).length === 2);
        expect(await letters()).toEqual(['handled']);
      });

      it('does the same when a poll finds the RelatedPerson corrected, the patient and the Coverage as the last poll found them', async () => {
        expect(await h.sync.pollAppointments()).toBe(1);
        expect(await h.sync.pollAppointments()).toBe(0);
        await h.fhir.seed(sofia('1987-04-09'));
        expect(await h.sync.pollAppointments()).toBe(1);
        await until('both written', async () => (await h.store.listChecks({ states: ['written'] })).length === 2);
        // The poll's own letter of it too.
        expect(await letters()).toEqual(['handled', 'handled']);
      });
    });

    it('reads it again when a poll finds the Coverage corrected, though the appointment did not change', async () => {
      await h.fhir.seed(chart());
      await h.sync.pollAppointments();
      expect(await letters()).toEqual(['dead']);
      expect(await h.sync.pollAppointments()).toBe(0);

      await h.fhir.seed(corrected());
      expect(await h.sync.pollAppointments()).toBe(1);
      await until('both written', async () => (await h.store.listChecks({ states: ['written'] })).length === 2);
      expect(await letters()).toEqual(['handled']);
    });
  });

  it('verifies a pending, arrived or checked-in appointment as a booked one', async () => {
    const pending = chartOf('primary-secondary').flatMap((r) => (r.resourceType === 'Appointment' ? [{ ...r, status: 'pending' as const }] : []));
    await h.fhir.seed(pending);
    const res = await fetch(`${h.httpUrl}/fhir-notifications/Appointment/appt-4004`, { method: 'POST' });
    expect(((await res.json()) as { issue: { diagnostics: string }[] }).issue[0]?.diagnostics).toBe('Appointment/appt-4004: booked');
    await until('both written', async () => (await h.store.listChecks({ states: ['written'] })).length === 2);
  });

  it('verifies nothing and withdraws nothing for a proposed, waitlisted or fulfilled appointment, and does not keep it waiting for insurance', async () => {
    const inStatus = (status: 'proposed' | 'waitlist' | 'fulfilled' | 'booked') =>
      h.fhir.seed(chartOf('primary-secondary').flatMap((r) => (r.resourceType === 'Appointment' ? [{ ...r, status }] : [])));
    const notify = async () => {
      const res = await fetch(`${h.httpUrl}/fhir-notifications/Appointment/appt-4004`, { method: 'POST' });
      expect(res.status).toBe(200);
      return ((await res.json()) as { issue: { diagnostics: string }[] }).issue[0]?.diagnostics;
    };
    await inStatus('proposed');
    expect(await notify()).toBe('Appointment/appt-4004: not-verified');
    expect(await h.store.listAppointments()).toEqual([]);
    expect(await h.store.listChecks()).toEqual([]);
    const [handled] = await h.store.listMessages({ kind: 'fhir-notification' });
    expect(handled).toMatchObject({ status: 'handled', detail: expect.stringMatching(/^not-verified: status proposed is neither verified nor withdrawn/) });
    // The same version again is the same notification.
    await notify();
    expect(await h.store.listMessages({ kind: 'fhir-notification' })).toHaveLength(1);

    await inStatus('booked');
    expect(await notify()).toBe('Appointment/appt-4004: booked');
    await until('both written', async () => (await h.store.listChecks({ states: ['written'] })).length === 2);
    // The visit happened: what was verified for it stays as it is.
    await inStatus('fulfilled');
    expect(await notify()).toBe('Appointment/appt-4004: not-verified');
    expect((await h.store.listAppointments()).map((a) => [a.key, a.status, a.checkKeys.length])).toEqual([['fhir|Appointment/appt-4004', 'booked', 2]]);
    expect((await h.store.listChecks()).map((c) => c.state)).toEqual(['written', 'written']);
  });

  it('stops waiting for insurance for an appointment notified as waitlisted after it was booked without coverage', async () => {
    const notify = async () => {
      const res = await fetch(`${h.httpUrl}/fhir-notifications/Appointment/appt-4004`, { method: 'POST' });
      return ((await res.json()) as { issue: { diagnostics: string }[] }).issue[0]?.diagnostics;
    };
    for (const r of chartOf('primary-secondary')) if (r.resourceType === 'Coverage' && r.id) await h.fhir.repo.deleteResource('Coverage', r.id);
    expect(await notify()).toBe('Appointment/appt-4004: awaiting-insurance');
    await h.fhir.seed(chartOf('primary-secondary').flatMap((r) => (r.resourceType === 'Appointment' ? [{ ...r, status: 'waitlist' as const }] : [])));
    expect(await notify()).toBe('Appointment/appt-4004: not-verified');
    expect((await h.store.listAppointments()).map((a) => [a.status, a.checkKeys])).toEqual([['cancelled', []]]);
  });

  it('reads the appointment an R4 backport id-only notification names in its SubscriptionStatus focus: a cancellation', async () => {
    await fetch(`${h.httpUrl}/fhir-notifications/Appointment/appt-4004`, { method: 'POST' });
    const cancelled = chartOf('primary-secondary').flatMap((r) => (r.resourceType === 'Appointment' ? [{ ...r, status: 'cancelled' as const }] : []));
    await h.fhir.seed(cancelled);
    // Subscriptions R5 Backport 1.1 (R4): the focus is named only in the Parameters' notification-event.
    const status = {
      resourceType: 'Parameters',
      parameter: [
        { name: 'subscription', valueReference: { reference: `${h.fhir.url}/Subscription/appointments` } },
        { name: 'status', valueCode: 'active' },
        { name: 'type', valueCode: 'event-notification' },
        { name: 'notification-event', part: [{ name: 'event-number', valueString: '2' }, { name: 'focus', valueReference: { reference: `${h.fhir.url}/Appointment/appt-4004` } }] },
      ],
    };
    const res = await fetch(`${h.httpUrl}/fhir-notifications`, {
      method: 'POST',
      headers: { 'content-type': 'application/fhir+json' },
      body: JSON.stringify({ resourceType: 'Bundle', type: 'history', entry: [{ fullUrl: 'urn:uuid:292d3c72-edc1-4d8a-afaa-d85e19c7f563', resource: status, request: { method: 'GET', url: `${h.fhir.url}/Subscription/appointments/$status` } }] }),
    });
    expect(res.status).toBe(200);
    expect((await h.store.listAppointments('cancelled')).map((a) => a.key)).toEqual(['fhir|Appointment/appt-4004']);
  });

  it('handles every appointment of a notification though one of them cannot be read, and keeps that one as a dead letter', async () => {
    const res = await fetch(`${h.httpUrl}/fhir-notifications`, {
      method: 'POST',
      headers: { 'content-type': 'application/fhir+json' },
      body: JSON.stringify({ resourceType: 'Bundle', type: 'history', entry: [{ fullUrl: `${h.fhir.url}/Appointment/gone` }, { fullUrl: `${h.fhir.url}/Appointment/appt-4004` }] }),
    });
    expect(res.status).toBe(422);
    const outcome = (await res.json()) as { issue: { diagnostics: string }[] };
    expect(outcome.issue[0]?.diagnostics).toMatch(/Appointment\/gone: .*no Appointment with id gone/);
    expect((await h.store.listAppointments('booked')).map((a) => a.key)).toEqual(['fhir|Appointment/appt-4004']);
    expect(await h.store.listChecks()).toHaveLength(2);
    const dead = await h.store.listMessages({ status: 'dead' });
    expect(dead.map((m) => m.detail)).toEqual([expect.stringMatching(/^Appointment\/gone: /)]);
  });

  it('handles the appointments of a notification beside an id R4 does not allow, 422 naming it, and keeps the notification as a dead letter', async () => {
    // Refused whole (400), the good appointment was never read, and the sender, told it erred, does not send it again.
    const res = await fetch(`${h.httpUrl}/fhir-notifications`, {
      method: 'POST',
      headers: { 'content-type': 'application/fhir+json' },
      body: JSON.stringify({ resourceType: 'Bundle', type: 'history', entry: [{ fullUrl: `${h.fhir.url}/Appointment/appt_4004!` }, { fullUrl: `${h.fhir.url}/Appointment/appt-4004` }] }),
    });
    expect(res.status).toBe(422);
    const outcome = (await res.json()) as { issue: { diagnostics: string }[] };
    expect(outcome.issue[0]?.diagnostics).toBe('Appointment.id is not an R4 id (1 to 64 of A-Z, a-z, 0-9, - and ., not . or ..); Appointment/appt-4004: booked');
    expect(await h.store.listChecks()).toHaveLength(2);
    const dead = await h.store.listMessages({ status: 'dead' });
    expect(dead.map((m) => [m.detail, m.raw.includes('appt_4004!')])).toEqual([['Appointment.id is not an R4 id (1 to 64 of A-Z, a-z, 0-9, - and ., not . or ..)', true]]);
  });

  it('keeps a notification naming many resources the chart refuses whole once, the letters of the others naming theirs alone', async () => {
    const ids = Array.from({ length: MAX_CHANGES }, (_, i) => `gone-${i}`);
    const body = JSON.stringify({ resourceType: 'Bundle', type: 'history', entry: ids.map((id) => ({ fullUrl: `${h.fhir.url}/Appointment/${id}` })) });
    const res = await fetch(`${h.httpUrl}/fhir-notifications`, { method: 'POST', headers: { 'content-type': 'application/fhir+json' }, body });
    expect(res.status).toBe(422);
    const dead = (await h.store.listMessages({ status: 'dead' })).sort((a, b) => a.id - b.id);
    // Each a copy of the notification, 100 of them would hold it 100 times.
    expect(dead.reduce((bytes, m) => bytes + m.raw.length, 0)).toBeLessThan(2 * body.length);
    expect(dead.map((m) => m.raw)).toEqual([body, ...ids.slice(1).map((id) => JSON.stringify({ reference: `Appointment/${id}` }))]);
    // Each names its resource first, which jobs replay reads again.
    expect(dead.map((m) => m.detail?.split(':')[0])).toEqual(ids.map((id) => `Appointment/${id}`));
  });

  it('cancels an appointment the server no longer has (deleted), withdrawing its checks, as a cancellation would', async () => {
    // Held back: the checks wait to be sent when the appointment goes.
    await h.sync.stop();
    expect((await fetch(`${h.httpUrl}/fhir-notifications/Appointment/appt-4004`, { method: 'POST' })).status).toBe(200);
    expect((await h.store.listChecks()).map((c) => c.state)).toEqual(['received', 'received']);
    expect((await fetch(`${h.fhir.url}/Appointment/appt-4004`, { method: 'DELETE' })).ok).toBe(true);

    const res = await fetch(`${h.httpUrl}/fhir-notifications/Appointment/appt-4004`, { method: 'POST' });
    expect(res.status).toBe(200);
    expect(((await res.json()) as { issue: { diagnostics: string }[] }).issue[0]?.diagnostics).toBe('Appointment/appt-4004: cancelled');
    expect((await h.store.listAppointments()).map((a) => [a.key, a.status])).toEqual([['fhir|Appointment/appt-4004', 'cancelled']]);
    expect((await h.store.listChecks()).map((c) => c.state)).toEqual(['cancelled', 'cancelled']);
    expect(await h.store.listMessages({ status: 'dead' })).toEqual([]);
  });

  it('refuses a notification naming more resources than one is read for, 413, reading none of them, and keeps it as a dead letter', async () => {
    const entry = Array.from({ length: MAX_CHANGES }, (_, i) => ({ fullUrl: `${h.fhir.url}/Appointment/appt-${i}` }));
    const res = await fetch(`${h.httpUrl}/fhir-notifications`, {
      method: 'POST',
      headers: { 'content-type': 'application/fhir+json' },
      body: JSON.stringify({ resourceType: 'Bundle', type: 'history', entry: [{ fullUrl: `${h.fhir.url}/Appointment/appt-4004` }, ...entry] }),
    });
    expect(res.status).toBe(413);
    const outcome = (await res.json()) as { issue: { code: string; diagnostics: string }[] };
    expect(outcome.issue[0]).toMatchObject({ code: 'too-costly', diagnostics: expect.stringMatching(/^names 101 resources, more than the 100 /) });
    // appt-4004, on the chart, was not read: no check.
    expect(await h.store.listChecks()).toEqual([]);
    const dead = await h.store.listMessages({ status: 'dead' });
    expect(dead.map((m) => [m.kind, m.detail])).toEqual([['fhir-notification', outcome.issue[0]?.diagnostics]]);
    expect(dead[0]?.raw).toContain('appt-4004');
  });

  it('refuses a notification over 1 MiB, 413, said and counted as refused, as one refused at the door is', async () => {
    const res = await fetch(`${h.httpUrl}/fhir-notifications`, { method: 'POST', headers: { 'content-type': 'application/fhir+json' }, body: `{"padding":"${'x'.repeat(1024 * 1024)}"}` });
    expect(res.status).toBe(413);
    const metrics = await (await fetch(`${h.httpUrl}/metrics`)).text();
    expect(metrics).toMatch(/^dental_elig_messages_total\{type="fhir-notification",ack="refused"\} 1$/m);
    expect(h.logs.filter((line) => line.includes('FHIR notification refused: its body exceeds 1 MiB'))).toHaveLength(1);
  });

  it('verifies the appointment a notification with an XML payload names by its path (channel.payload application/fhir+xml)', async () => {
    const xml = '<Appointment xmlns="http://hl7.org/fhir"><id value="appt-4004"/><status value="booked"/></Appointment>';
    const res = await fetch(`${h.httpUrl}/fhir-notifications/Appointment/appt-4004`, { method: 'POST', headers: { 'content-type': 'application/fhir+xml' }, body: xml });
    expect(res.status).toBe(200);
    await until('both written', async () => (await h.store.listChecks({ states: ['written'] })).length === 2);
    expect(await h.store.listMessages({ status: 'dead' })).toEqual([]);
  });

  it('answers an unreadable notification 400 with an OperationOutcome and keeps it as a dead letter', async () => {
    const res = await fetch(`${h.httpUrl}/fhir-notifications`, { method: 'POST', body: '{"resourceType": "Appointment", "id": WHITAKER' });
    expect(res.status).toBe(400);
    const outcome = (await res.json()) as { resourceType: string; issue: { diagnostics: string }[] };
    expect(outcome.resourceType).toBe('OperationOutcome');
    expect(outcome.issue[0]?.diagnostics).toBe('body is not valid JSON at line 1, column 39: unexpected character where a value was expected');
    expect(JSON.stringify(outcome)).not.toContain('WHITAKER');
    const dead = await h.store.listMessages({ status: 'dead' });
    expect(dead).toHaveLength(1);
    expect(dead[0]?.raw).toContain('WHITAKER');
  });
});
