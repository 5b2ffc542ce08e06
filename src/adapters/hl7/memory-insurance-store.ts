import type { PatientInsuranceRecord, PatientInsuranceStore, PatientKey } from '../../domain';
import { copyOf } from './plain-data';

/**
 * The patient insurance store kept in memory: for the CLI (one file, one run) and for tests. The
 * service uses a durable store behind the same interface. Records are copied both ways, so a caller
 * cannot change what is stored by holding on to an object. Nothing here crosses a boundary, so
 * nothing is parsed by a schema: records come typed from the adapter and never leave this object.
 */
export class InMemoryPatientInsuranceStore implements PatientInsuranceStore {
  private readonly records = new Map<string, PatientInsuranceRecord>();

  async get(key: PatientKey): Promise<PatientInsuranceRecord | undefined> {
    const record = this.records.get(keyText(key));
    return record && copyOf(record);
  }

  async put(key: PatientKey, record: PatientInsuranceRecord): Promise<void> {
    this.records.set(keyText(key), copyOf(record));
  }

  get size(): number {
    return this.records.size;
  }
}

/**
 * The facility as written, as serve's job store keys it: `convert hl7` and serve must tell patients
 * apart alike. Joined at NUL, which no value read from a message holds (control characters are
 * dropped), as plan keys are: JSON of the three cost twice as much, and a message looks up two.
 */
function keyText(key: PatientKey): string {
  return `${key.facility.trim()}\u0000${key.identifier.system ?? ''}\u0000${key.identifier.value}`;
}
