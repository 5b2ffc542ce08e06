import * as z from 'zod';
import { Gender, Relationship } from '../../domain';
import { readMappingFile } from '../../mapping-files';

const CodeMap = <T extends z.ZodType>(target: T) => z.record(z.string().min(1), target);

const RelationshipFile = z.looseObject({
  tables: z.record(z.string().min(1), CodeMap(Relationship)),
});

const GenderFile = z.looseObject({
  codes: CodeMap(Gender),
});

/** HL7 and X12 code tables as data (mappings/hl7/relationship.json, gender.json). */
export interface CodeTables {
  relationshipTables: ReadonlySet<string>;
  /** The relationship a code means in the first of these tables that lists it. */
  relationship(code: string, tables: readonly string[]): Relationship | undefined;
  /** Table 0001 to FHIR gender; a code the table does not list is `unknown`. */
  gender(code: string): Gender;
}

const normalise = (code: string) => code.trim().toUpperCase();

const upperKeys = <T>(table: Record<string, T>) =>
  new Map(Object.entries(table).map(([code, value]) => [normalise(code), value] as const));

export function loadCodeTables(dir?: string): CodeTables {
  const relationships = readMappingFile('hl7/relationship.json', RelationshipFile, dir).tables;
  const byTable = new Map(Object.entries(relationships).map(([name, table]) => [name, upperKeys(table)] as const));
  const genders = upperKeys(readMappingFile('hl7/gender.json', GenderFile, dir).codes);
  return {
    relationshipTables: new Set(byTable.keys()),
    relationship(code, tables) {
      for (const name of tables) {
        const found = byTable.get(name)?.get(normalise(code));
        if (found) return found;
      }
      return undefined;
    },
    gender: (code) => genders.get(normalise(code)) ?? 'unknown',
  };
}
