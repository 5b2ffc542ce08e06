import * as z from 'zod';
import { Relationship } from '../../../domain';
import { readMappingFile } from '../../../mapping-files';
import type { CodeableConcept } from './shapes';

const RelationshipFile = z.looseObject({
  systems: z.record(z.string().min(1), z.record(z.string().min(1), Relationship)),
});

let table: z.infer<typeof RelationshipFile>['systems'] | undefined;
/** The codes by system, read once. */
export const relationshipSystems = () => (table ??= readMappingFile('fhir/subscriber-relationship.json', RelationshipFile).systems);

/**
 * Coverage.relationship through mappings/fhir/subscriber-relationship.json: the first coding
 * whose system and code the file lists. `unmapped` names what was there, for the error.
 */
export function relationshipOf(concept: CodeableConcept): { relationship: Relationship } | { unmapped: string } {
  const codings = concept.coding ?? [];
  for (const coding of codings) {
    const mapped = coding.system && coding.code ? relationshipSystems()[coding.system]?.[coding.code] : undefined;
    if (mapped) return { relationship: mapped };
  }
  const first = codings[0];
  return { unmapped: first ? `${first.system ?? '(no system)'}#${first.code ?? '(no code)'}` : 'no coding' };
}
