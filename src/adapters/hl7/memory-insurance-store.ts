import type { PatientInsuranceRecord, PatientInsuranceStore, PatientKey } from '../../domain';

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

/** The facility as written, as serve's job store keys it: `convert hl7` and serve must tell patients apart alike. */
function keyText(key: PatientKey): string {
  return JSON.stringify([key.facility.trim(), key.identifier.system ?? '', key.identifier.value]);
}

/**
 * A deep copy of plain data (objects, arrays, strings, numbers, booleans), which a record is: a
 * fraction of what a JSON round trip or structuredClone costs, and a record is copied twice a message.
 */
function copyOf<T>(value: T): T {
  if (Array.isArray(value)) return value.map(copyOf) as T;
  if (value === null || typeof value !== 'object') return value;
  const source = value as Record<string, unknown>;
  const copy: Record<string, unknown> = {};
  for (const k of Object.keys(source)) copy[k] = copyOf(source[k]);
  return copy as T;
}
