import { cp, mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import * as path from 'node:path';
import { loadHl7Mappings, profileFor } from '../../../src/adapters/hl7';
import { mappingsDir } from '../../../src/mapping-files';

describe('the shipped HL7 mappings', () => {
  const mappings = loadHl7Mappings();

  it('load, with the default profile and the MolarPMS dialect', () => {
    expect(mappings.defaultProfile.name).toBe('default');
    expect(mappings.dialects.map((d) => d.name)).toContain('molarpms');
  });

  it('select a dialect by MSH-3 regardless of case, and the default for anyone else', () => {
    expect(profileFor(mappings, 'molarpms').name).toBe('molarpms');
    expect(profileFor(mappings, 'SOMEOTHERPMS').name).toBe('default');
  });

  it('let a dialect replace single entries and inherit the rest', () => {
    const molar = profileFor(mappings, 'MOLARPMS');
    expect(molar.insurance.subscriberMemberId.map((p) => p.text)).toEqual(['IN1-49', 'ZIN-2']);
    expect(mappings.defaultProfile.insurance.subscriberMemberId.map((p) => p.text)).toEqual(['IN1-36', 'IN1-49']);
    // IN2-61 is the patient's own member number, never the subscriber's.
    expect(molar.insurance.patientMemberId.map((p) => p.text)).toEqual(['IN2-61']);
    expect(molar.insurance.payerId).toEqual(mappings.defaultProfile.insurance.payerId);
    expect(molar.events).toEqual(mappings.defaultProfile.events);
  });

  it('map relationship codes by the tables a field names: the same code means different things in X12 and table 0344', () => {
    const { codeTables } = mappings;
    expect(codeTables.relationship('sel', ['0063', 'x12'])).toBe('self');
    expect(codeTables.relationship('18', ['0063', 'x12'])).toBe('self');
    expect(codeTables.relationship('01', ['0063', 'x12'])).toBe('spouse');
    expect(codeTables.relationship('01', ['0344'])).toBe('self');
    expect(codeTables.relationship('19', ['x12'])).toBe('child');
    expect(codeTables.relationship('G8', ['x12'])).toBe('other');
    expect(codeTables.relationship('CHD', ['0344'])).toBeUndefined();
  });

  it('map relationships written as words, whatever their case, spaces and hyphens; an ambiguous word is ambiguous, not guessed', () => {
    const { codeTables } = mappings;
    const words = ['SELF', 'Self', 'spouse', 'Wife', 'Child', 'Step-Child', 'stepchild', 'Foster  child', 'Domestic_Partner', 'Other'];
    expect(words.map((w) => codeTables.relationship(w, ['0063', 'x12', 'words']))).toEqual([
      'self', 'self', 'spouse', 'spouse', 'child', 'child', 'child', 'child', 'other', 'other',
    ]);
    for (const word of ['Dependent', 'Parent', 'mother']) expect(codeTables.relationship(word, ['0344', 'words'])).toBe('ambiguous');
    expect(codeTables.relationship('Self', ['0063', 'x12'])).toBeUndefined();
    expect(codeTables.relationship('Cousin', ['0063', 'x12', 'words'])).toBeUndefined();
    expect(codeTables.relationshipTableLabel('0063')).toBe('table 0063');
  });

  it('map table 0001 and gender words to FHIR gender, an unlisted one being unknown', () => {
    expect(['F', 'M', 'O', 'U', 'A', 'N', 'Q'].map((c) => mappings.codeTables.gender(c))).toEqual([
      'female', 'male', 'other', 'unknown', 'other', 'other', 'unknown',
    ]);
    expect(['Female', 'MALE', 'male ', 'Non-binary', 'Unknown', 'Mal'].map((c) => mappings.codeTables.gender(c))).toEqual([
      'female', 'male', 'male', 'other', 'unknown', 'unknown',
    ]);
  });
  it('map provider roles (AIP-4, AIG-4) to the dentist who treats or one who assists, an unlisted one to neither', () => {
    expect(['DDS', 'Dentist', 'AT', 'pp', 'HYG', 'Dental-Hygienist', 'rdh', 'EFDA', 'D', 'H', ''].map((c) => mappings.codeTables.providerRole(c))).toEqual([
      'treating', 'treating', 'treating', 'treating', 'assisting', 'assisting', 'assisting', 'assisting', undefined, undefined, undefined,
    ]);
  });
});

describe('a bad mapping edit fails at load, naming the file and the entry', () => {
  let dir: string;
  beforeEach(async () => {
    dir = await mkdtemp(path.join(tmpdir(), 'hl7-mappings-'));
    await cp(path.join(mappingsDir(), 'hl7'), path.join(dir, 'hl7'), { recursive: true });
  });
  afterEach(() => rm(dir, { recursive: true, force: true }));

  const edit = async (file: string, change: (json: Record<string, unknown>) => void) => {
    const full = path.join(dir, 'hl7', file);
    const json = JSON.parse(await readFile(full, 'utf8')) as Record<string, unknown>;
    change(json);
    await writeFile(full, JSON.stringify(json));
  };

  it('a path that is not a field path', async () => {
    await edit('default.json', (j) => ((j.patient as Record<string, unknown>).birthDate = ['PID7']));
    expect(() => loadHl7Mappings(dir)).toThrow(/^mappings\/hl7\/default\.json: patient\.birthDate\.0: "PID7" is not a field path/);
  });

  it('a component where a whole field is needed', async () => {
    await edit('default.json', (j) => ((j.patient as Record<string, unknown>).name = ['PID-5.1']));
    expect(() => loadHl7Mappings(dir)).toThrow(/default\.json: patient\.name\.0: must name a whole field/);
  });

  it('an unknown entry in a dialect', async () => {
    await edit('dialects/molarpms.json', (j) => ((j.insurance as Record<string, unknown>).memberNumber = ['IN1-49']));
    expect(() => loadHl7Mappings(dir)).toThrow(/dialects\/molarpms\.json: insurance/);
  });

  it('a processing id not in table 0103, or none', async () => {
    await edit('dialects/molarpms.json', (j) => (j.processingIds = ['X']));
    expect(() => loadHl7Mappings(dir)).toThrow(/dialects\/molarpms\.json: processingIds\.0: must be P, T or D \(HL7 table 0103\)/);
    await edit('dialects/molarpms.json', (j) => (j.processingIds = ['T']));
    expect(loadHl7Mappings(dir).dialects.find((d) => d.name === 'molarpms')?.processingIds).toEqual(['T']);
    await edit('default.json', (j) => (j.processingIds = []));
    expect(() => loadHl7Mappings(dir)).toThrow(/default\.json: processingIds: name at least one processing id/);
  });

  it('a relationship table that does not exist', async () => {
    await edit('dialects/molarpms.json', (j) => ((j.insurance as Record<string, unknown>).subscriberRelationship = [{ path: 'IN1-17', tables: ['0099'] }]));
    expect(() => loadHl7Mappings(dir)).toThrow(/molarpms: relationship table 0099 is not in mappings\/hl7\/relationship\.json/);
  });

  it('a provider role that is neither treating nor assisting', async () => {
    await edit('provider-role.json', (j) => ((j.codes as Record<string, unknown>).HYG = 'hygienist'));
    expect(() => loadHl7Mappings(dir)).toThrow(/^mappings\/hl7\/provider-role\.json: codes\.HYG: /);
  });

  it('two dialects claiming one sending application', async () => {
    await cp(path.join(dir, 'hl7/dialects/molarpms.json'), path.join(dir, 'hl7/dialects/copy.json'));
    await edit('dialects/copy.json', (j) => (j.name = 'copy'));
    expect(() => loadHl7Mappings(dir)).toThrow(/sending application MOLARPMS is claimed by both/);
  });

  it('a folder without dialects is fine', async () => {
    await rm(path.join(dir, 'hl7', 'dialects'), { recursive: true });
    expect(loadHl7Mappings(dir).dialects).toEqual([]);
  });

  it('a dialects folder that cannot be listed, rather than its dialects left unread', async () => {
    // As root can list a folder whatever its permissions, a file in its place stands for one the service user may not read.
    await rm(path.join(dir, 'hl7', 'dialects'), { recursive: true });
    await writeFile(path.join(dir, 'hl7', 'dialects'), '');
    expect(() => loadHl7Mappings(dir)).toThrow(/^mappings\/hl7\/dialects: cannot be listed \(ENOTDIR\)/);
  });
});
