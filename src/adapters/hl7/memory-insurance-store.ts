import type { PatientInsuranceRecord, PatientInsuranceStore, PatientKey } from '../../domain';

/**
 * The patient insurance store kept in memory: for the CLI (one file, one run) and for tests. The
 * service uses a durable store behind the same interface. Records are kept as JSON text, as the
 * durable store keeps them: what a caller holds is never what is stored, and what comes back is
 * what the durable store would give. Nothing here crosses a boundary, so nothing is parsed by a
 * schema: records come typed from the adapter, and the text never leaves this object.
 */
export class InMemoryPatientInsuranceStore implements PatientInsuranceStore {
  private readonly records = new Map<string, string>();

  async get(key: PatientKey): Promise<PatientInsuranceRecord | undefined> {
    const text = this.records.get(keyText(key));
    return text === undefined ? undefined : (JSON.parse(text) as PatientInsuranceRecord);
  }

  async put(key: PatientKey, record: PatientInsuranceRecord): Promise<void> {
    this.records.set(keyText(key), JSON.stringify(record));
  }

  get size(): number {
    return this.records.size;
  }
}

function keyText(key: PatientKey): string {
  return JSON.stringify([key.facility.trim().toUpperCase(), key.identifier.system ?? '', key.identifier.value]);
}
