import { PatientInsuranceRecord, type PatientInsuranceStore, type PatientKey } from '../../domain';

/**
 * The patient insurance store kept in memory: for the CLI (one file, one run) and for tests. The
 * service uses a durable store behind the same interface. Records are validated on the way in and
 * copied both ways, so a caller cannot change what is stored by holding on to an object.
 */
export class InMemoryPatientInsuranceStore implements PatientInsuranceStore {
  private readonly records = new Map<string, PatientInsuranceRecord>();

  async get(key: PatientKey): Promise<PatientInsuranceRecord | undefined> {
    const record = this.records.get(keyText(key));
    return record && structuredClone(record);
  }

  async put(key: PatientKey, record: PatientInsuranceRecord): Promise<void> {
    // parse builds new objects and arrays throughout: the stored record is already a copy.
    this.records.set(keyText(key), PatientInsuranceRecord.parse(record));
  }

  get size(): number {
    return this.records.size;
  }
}

function keyText(key: PatientKey): string {
  return JSON.stringify([key.facility.trim().toUpperCase(), key.identifier.system ?? '', key.identifier.value]);
}
