import { FhirInputError } from '../../src/adapters/fhir/operation-outcome';
import { changeOf, refusedOn } from '../../src/sync/dead-letters';
import { notReplayed } from '../../src/sync/operations';

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
