import type { Extension } from 'fhir/r4';
import * as z from 'zod';
import { readMappingFile } from '../../../mapping-files';
import { baseUrl, BaseUrl } from '../base-url';

/** Every extension the writer uses; mappings/fhir/extensions.json must declare exactly these. */
export const EXTENSION_KEYS = [
  'verification-created',
  'verification-completed',
  'disclaimer',
  'unmapped-element',
  'payer-phone',
  'plan',
  'plan-assignment',
  'payer-patient',
  'payer-subscriber',
  'procedure-code',
  'service-history',
  'remaining-amount',
  'carryover-amount',
  'remaining-carryover-amount',
  'waived-category',
  'percentage-range',
  'frequency-period',
  'last-service-date',
  'waiting-period-ends',
  'error-detail',
  'problem-type',
  'problem-status',
  'problem-instance',
  'failure-action',
  'portal',
  'data-point',
  'error-field',
  'coverage-stated-at',
  'coverage-ended',
  'patient-stated-at',
] as const;
export type ExtensionKey = (typeof EXTENSION_KEYS)[number];

const ExtensionDefinition = z.strictObject({
  context: z.string().min(1),
  /** A FHIR value[x] type name, or `complex` for sub-extensions. */
  value: z.string().min(1),
  parts: z.array(z.string().regex(/^[A-Za-z][A-Za-z0-9]*$/, { error: 'must be a plain name' })).optional(),
  source: z.string().min(1),
});

const ExtensionsFile = z.looseObject({
  base: BaseUrl,
  extensions: z.record(z.enum(EXTENSION_KEYS), ExtensionDefinition),
});
export type ExtensionsFile = z.infer<typeof ExtensionsFile>;

let file: ExtensionsFile | undefined;
export const extensionsFile = (): ExtensionsFile => (file ??= readMappingFile('fhir/extensions.json', ExtensionsFile));

let base: string | undefined;
/** The base all extension URLs hang off; DENTAL_ELIG_FHIR_EXTENSION_BASE moves it to a canonical the operator owns. Read once, with the file. */
export function extensionBase(): string {
  return (base ??= baseUrl(extensionsFile().base, 'DENTAL_ELIG_FHIR_EXTENSION_BASE'));
}

/** Each URL made once: a response names some thirty, and each made anew is a new string to write out. */
const urls = new Map<ExtensionKey, string>();
export function extensionUrl(key: ExtensionKey): string {
  let url = urls.get(key);
  if (url === undefined) urls.set(key, (url = extensionBase() + key));
  return url;
}

type ExtensionValue = Omit<Extension, 'url' | 'extension'>;

/** A simple extension; undefined when there is no value to carry. */
export function extension(key: ExtensionKey, value: ExtensionValue | undefined): Extension | undefined {
  return value === undefined ? undefined : { url: extensionUrl(key), ...value };
}

/** A complex extension from its declared parts; absent parts are left out, no parts at all gives undefined. */
export function complexExtension(key: ExtensionKey, parts: Record<string, ExtensionValue | undefined>): Extension | undefined {
  const declared = extensionsFile().extensions[key].parts ?? [];
  const sub: Extension[] = [];
  for (const [part, value] of Object.entries(parts)) {
    if (!declared.includes(part)) throw new Error(`extension ${key} declares no part "${part}" in mappings/fhir/extensions.json`);
    if (value !== undefined) sub.push({ url: part, ...value });
  }
  return sub.length > 0 ? { url: extensionUrl(key), extension: sub } : undefined;
}
