import type { EligibilityCheck } from '../../../domain';
import { FhirInputError } from '../operation-outcome';
import { relativeTail } from './bundle-index';
import { convertBundle, type FhirConversion, type FhirInputOptions } from './from-bundle';
import { MAX_MERGES, replacedBy } from './merged-patient';
import { Appointment, Coverage } from './shapes';

/** What the adapter needs from a FHIR server; small, so a test or an integrator can supply their own. */
export interface FhirReader {
  /** The resource, or undefined when the server has none (404, 410). */
  read(resourceType: string, id: string): Promise<unknown>;
  /**
   * Every match, across pages; a parameter given several values is repeated (all must match). More
   * pages than `maxPages` (the reader's own limit when not given) fail the search.
   */
  search(resourceType: string, params: Record<string, string | string[]>, options?: { maxPages?: number }): Promise<unknown[]>;
}

const PARTICIPANT_TYPES = ['Patient', 'Practitioner', 'Location'];

/** The checks of convertFromServer alone, for callers with no use for its notes. */
export async function checksFromServer(reader: FhirReader, appointmentId: string, options: Omit<FhirInputOptions, 'appointmentId'>): Promise<EligibilityCheck[]> {
  return (await convertFromServer(reader, appointmentId, options)).checks;
}

/**
 * Reads what an appointment's checks need (the Appointment, its Patient, Practitioner and
 * Location, the Patient a merged one was merged into, that patient's active Coverages with their payor Organizations and subscribers) and
 * converts it exactly as a Bundle holding those resources would be.
 */
export async function convertFromServer(
  reader: FhirReader,
  appointmentId: string,
  options: Omit<FhirInputOptions, 'appointmentId'>,
): Promise<FhirConversion> {
  const gathered = new Map<string, unknown>();
  const gather = async (reference: string | undefined, types: string[]) => {
    const tail = reference ? relativeTail(reference) : undefined;
    if (!tail || gathered.has(tail)) return;
    const [type, id] = tail.split('/') as [string, string];
    if (!types.includes(type)) return;
    const resource = await reader.read(type, id);
    if (resource !== undefined) gathered.set(tail, resource);
  };

  const appointment = await reader.read('Appointment', appointmentId);
  if (appointment === undefined) {
    throw new FhirInputError([{ expression: 'Appointment', diagnostics: `the server has no Appointment with id ${appointmentId}`, code: 'not-found' }]);
  }
  gathered.set(`Appointment/${appointmentId}`, appointment);
  // Read what parses; what does not is reported by the Bundle conversion, naming the element.
  const participants = Appointment.safeParse(appointment).data?.participant ?? [];
  for (const p of participants) await gather(p.actor?.reference, PARTICIPANT_TYPES);

  let patient = [...gathered.keys()].find((key) => key.startsWith('Patient/'));
  // A merged record's coverages moved to the record that replaced it, as convertBundle follows it.
  for (let merges = 0; patient && merges < MAX_MERGES; merges++) {
    const next = relativeTail(replacedBy(gathered.get(patient))?.reference ?? '');
    if (!next) break;
    await gather(next, ['Patient']);
    if (!gathered.has(next)) break;
    patient = next;
  }
  if (patient) {
    // `patient` (Coverage.beneficiary) is the parameter US Core servers must support; beneficiary is not among them.
    const coverages = await reader.search('Coverage', { patient, status: 'active' });
    for (const found of coverages) {
      const coverage = Coverage.safeParse(found).data;
      if (!coverage?.id) continue;
      gathered.set(`Coverage/${coverage.id}`, found);
      for (const payor of coverage.payor ?? []) await gather(payor.reference, ['Organization', 'Patient', 'RelatedPerson']);
      await gather(coverage.subscriber?.reference, ['Patient', 'RelatedPerson']);
    }
  }

  const bundle = {
    resourceType: 'Bundle',
    type: 'collection',
    entry: [...gathered.values()].map((resource) => ({ resource })),
  };
  return convertBundle(bundle, { ...options, appointmentId });
}
