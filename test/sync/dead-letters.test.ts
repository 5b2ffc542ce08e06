import { FhirInputError } from '../../src/adapters/fhir/operation-outcome';
import { changeOf, detailForLog, keepUnhandled, refusedOn, resolveResent } from '../../src/sync/dead-letters';
import { dismissMessage, notReplayed } from '../../src/sync/operations';
import { storePerTest } from '../support/sqlite-store';

/** What `jobs replay` reads again of a FHIR letter: the resource its detail names first, as the handler and the poll wrote it. */
describe('the resource a FHIR dead letter names', () => {
  const refused = new FhirInputError([{ expression: 'Appointment', diagnostics: 'the FHIR server answered 403 to the read', code: 'forbidden' }]);

  it('reads back what refusedOn wrote, as this version and the one before wrote it', () => {
    expect(changeOf(refusedOn({ type: 'Coverage', id: 'cov-marco-aetna' }, refused))).toEqual({ type: 'Coverage', id: 'cov-marco-aetna' });
    expect(changeOf('Appointment/appt-4004: Appointment: the FHIR server answered 403 to the read (replayed)')).toEqual({ type: 'Appointment', id: 'appt-4004' });
  });

  it('names nothing for a letter the chart refused nothing of, nor for an id the chart cannot be read by', () => {
    for (const detail of [
      'not handled (FHIR server unreachable); the sender was asked to send it again',
      'body is not JSON (at 1:2)',
      'Appointment.id missing',
      'resourceType Appointment/x: is not Appointment, Patient or Coverage',
      // A URL takes these as path steps: `Appointment/.` is a search of every appointment, `Coverage/..` the chart's base.
      'Appointment/.: Appointment: the FHIR server answered 403 to the read',
      'Coverage/..: Coverage: the FHIR server answered 403 to the read',
      undefined,
    ]) {
      expect(changeOf(detail)).toBeUndefined();
    }
    expect(notReplayed({ kind: 'fhir-notification', detail: 'Appointment/.: refused' })).toMatch(/names no resource the chart refused/);
  });
});

/** A notification answered 500 is one letter a day (keepUnhandled), let go of once a resend is handled (resolveResent) or a person dismisses it. */
describe("a FHIR letter's detail for the log", () => {
  it("names no id of a patient's resources, the one it is about nor the others it names, as a chart's ids may be made of a name", () => {
    expect(detailForLog('Appointment/appt-1001: Appointment.participant.actor.where(resolve() is Patient): references Patient/pat-ellen, which the bundle does not hold')).toBe(
      'Appointment/(id): Appointment.participant.actor.where(resolve() is Patient): references Patient/(id), which the bundle does not hold',
    );
    expect(detailForLog('Coverage/cov-marco-aetna: Coverage.subscriber: references RelatedPerson/rp-sofia, which the bundle does not hold')).toBe(
      'Coverage/(id): Coverage.subscriber: references RelatedPerson/(id), which the bundle does not hold',
    );
    // A Coverage the chart holds wrong is named by its id in a FHIRPath (BundleIndex.pathOf).
    expect(detailForLog("Appointment/appt-ellen: Coverage.where(id='cov-ellen-aetna').period.start: must be a FHIR dateTime")).toBe(
      "Appointment/(id): Coverage.where(id='(id)').period.start: must be a FHIR dateTime",
    );
    // What names no resource of a patient's is said whole: the field, the status.
    expect(detailForLog('Appointment/1: the FHIR server answered 401 to the read; Practitioner/prac-chen')).toBe('Appointment/(id): the FHIR server answered 401 to the read; Practitioner/prac-chen');
    expect(detailForLog('body is not valid JSON at line 1, column 2')).toBe('body is not valid JSON at line 1, column 2');
  });
});

describe('the letter of a FHIR notification the sender was asked to send again', () => {
  const store = storePerTest('dead-letters-');
  const letter = (at: string) => ({ url: '/fhir-notifications/Appointment/appt-4004', raw: '', kept: '{"path":"/fhir-notifications/Appointment/appt-4004"}', reason: 'not handled (FHIR server unreachable); the sender was asked to send it again', receivedAt: new Date(at) });

  it('is kept once however often the try fails, and dead again when a try fails after it was let go of, by a resend handled or by a person', async () => {
    expect([await keepUnhandled(store(), letter('2026-11-26T09:00:00Z')), await keepUnhandled(store(), letter('2026-11-26T09:05:00Z'))]).toEqual([true, false]);
    const [kept] = await store().listMessages({ status: 'dead' });
    expect(await resolveResent(store(), { url: letter('').url, raw: '', handledAt: new Date('2026-11-26T09:10:00Z') })).toBe(1);
    expect(await keepUnhandled(store(), letter('2026-11-26T09:15:00Z'))).toBe(true);
    // A person dismissed it, the chart's outage seemingly over: the same notification failing since is theirs to know of.
    await dismissMessage(store(), kept?.id ?? 0);
    expect(await keepUnhandled(store(), letter('2026-11-26T09:20:00Z'))).toBe(true);
    expect((await store().listMessages({ status: 'dead' })).map((m) => [m.id, m.detail])).toEqual([[kept?.id, letter('').reason]]);
  });
});
