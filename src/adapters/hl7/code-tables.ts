import * as z from 'zod';
import { Gender, Relationship } from '../../domain';
import { readMappingFile } from '../../mapping-files';

const CodeMap = <T extends z.ZodType>(target: T) => z.record(z.string().min(1), target);

const RelationshipFile = z.looseObject({
  /** How an error names each table (`table 0063`); the table's key when absent. */
  labels: z.record(z.string().min(1), z.string().min(1)).default({}),
  /** null: a value that is ambiguous, answered AE rather than guessed. */
  tables: z.record(z.string().min(1), CodeMap(Relationship.nullable())),
});

const GenderFile = z.looseObject({
  codes: CodeMap(Gender),
});

/** Who a person of an appointment is: the dentist who treats, or one who assists (a hygienist, an assistant). */
export const ProviderRole = z.enum(['treating', 'assisting']);
export type ProviderRole = z.infer<typeof ProviderRole>;

const ProviderRoleFile = z.looseObject({
  codes: CodeMap(ProviderRole),
});

/** What a relationship value means: one of the hub's relationships, or ambiguous (null in the file). */
export type RelationshipReading = Relationship | 'ambiguous';

/** HL7 and X12 code tables as data (mappings/hl7/relationship.json, gender.json, provider-role.json). */
export interface CodeTables {
  relationshipTables: ReadonlySet<string>;
  /** What a code or word means in the first of these tables that lists it. */
  relationship(code: string, tables: readonly string[]): RelationshipReading | undefined;
  /** How errors name a table: `table 0063`, `X12`. */
  relationshipTableLabel(table: string): string;
  /** Table 0001 code or word to FHIR gender; one the table does not list is `unknown`. */
  gender(code: string): Gender;
  /** AIP-4 or AIG-4 code or word to a provider role; undefined for one the table does not list. */
  providerRole(code: string): ProviderRole | undefined;
}

/** Codes and words alike: case, and runs of spaces, hyphens and underscores, do not count. */
const normalise = (code: string) => code.trim().toUpperCase().replace(/[\s_-]+/g, ' ');

const normalisedKeys = <T>(table: Record<string, T>) =>
  new Map(Object.entries(table).map(([code, value]) => [normalise(code), value] as const));

export function loadCodeTables(dir?: string): CodeTables {
  const file = readMappingFile('hl7/relationship.json', RelationshipFile, dir);
  const byTable = new Map(Object.entries(file.tables).map(([name, table]) => [name, normalisedKeys(table)] as const));
  const genders = normalisedKeys(readMappingFile('hl7/gender.json', GenderFile, dir).codes);
  const roles = normalisedKeys(readMappingFile('hl7/provider-role.json', ProviderRoleFile, dir).codes);
  return {
    relationshipTables: new Set(byTable.keys()),
    relationship(code, tables) {
      const key = normalise(code);
      for (const name of tables) {
        const found = byTable.get(name)?.get(key);
        if (found !== undefined) return found ?? 'ambiguous';
      }
      return undefined;
    },
    relationshipTableLabel: (table) => file.labels[table] ?? table,
    gender: (code) => genders.get(normalise(code)) ?? 'unknown',
    providerRole: (code) => roles.get(normalise(code)),
  };
}
