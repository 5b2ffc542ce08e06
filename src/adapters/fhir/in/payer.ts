import * as z from 'zod';
import { ConfigError } from '../../../config-error';
import type { PayerAsNamed } from '../../../domain';
import { readMappingFile } from '../../../mapping-files';
import type { Identifier } from './shapes';

const Rule = z
  .strictObject({
    system: z.string().min(1).optional(),
    type: z.strictObject({ system: z.string().min(1), code: z.string().min(1) }).optional(),
    label: z.string().optional(),
  })
  .refine((r) => r.system !== undefined || r.type !== undefined, { error: 'needs a system or a type' });

const PayerIdentifiersFile = z.looseObject({
  rules: z
    .array(Rule)
    .min(1)
    .refine((rules) => rules[0]?.system !== undefined, { error: 'the first rule must name a system: payer ids are written in it' }),
  anyIdentifier: z.boolean().default(false),
});

let file: z.infer<typeof PayerIdentifiersFile> | undefined;
const rules = () => (file ??= readMappingFile('fhir/payer-identifiers.json', PayerIdentifiersFile));

/** The identifier system this plugin writes payer ids in (the first rule's). */
export function payerIdSystem(): string {
  const [first] = rules().rules;
  if (!first?.system) throw new ConfigError('mappings/fhir/payer-identifiers.json: rules.0.system: required');
  return first.system;
}

/** The payer id among an Organization's identifiers, by the rules of mappings/fhir/payer-identifiers.json. */
export function payerIdOf(identifiers: Identifier[] | undefined): string | undefined {
  const usable = (identifiers ?? []).filter((i) => i.value?.trim() && i.use !== 'old');
  for (const rule of rules().rules) {
    const match = usable.find(
      (i) =>
        (rule.system === undefined || i.system === rule.system) &&
        (rule.type === undefined || (i.type?.coding ?? []).some((c) => c.system === rule.type?.system && c.code === rule.type?.code)),
    );
    if (match) return match.value?.trim();
  }
  return rules().anyIdentifier ? usable[0]?.value?.trim() : undefined;
}

/** The payer as named by a payor Organization, or by a logical reference's identifier and display. */
export function payerAsNamed(name: string | undefined, identifiers: Identifier[] | undefined): PayerAsNamed {
  return { name: name?.trim() || undefined, id: payerIdOf(identifiers) };
}
