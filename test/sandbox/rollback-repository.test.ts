import { Operator, type SearchRequest } from '@medplum/core';
import { MemoryRepository } from '@medplum/fhir-router';
import type { Patient } from '@medplum/fhirtypes';
import { createFhirHandler } from '../../src/sandbox/fhir-server';
import { RollbackRepository } from '../../src/sandbox/rollback-repository';

type Filter = NonNullable<SearchRequest['filters']>[number];

const MRN = 'urn:example:mrn';
const OTHER = 'urn:example:other';
const byIdentifier = (value: string): SearchRequest => ({ resourceType: 'Patient', filters: [{ code: 'identifier', operator: Operator.EQUALS, value }] });
const found = async (repo: RollbackRepository, value: string) => ((await repo.search(byIdentifier(value))).entry ?? []).map((e) => e.resource?.id).sort();

/** A fresh repository as the FHIR server has it (search parameters indexed, as creating a handler does). */
const newRepo = () => {
  createFhirHandler();
  return new RollbackRepository();
};

describe('RollbackRepository identifier search', () => {
  afterEach(() => jest.restoreAllMocks());

  it('answers an identifier search from its index, without reading every resource of the type', async () => {
    const scan = jest.spyOn(MemoryRepository.prototype, 'search');
    const repo = newRepo();
    const a = await repo.createResource({ resourceType: 'Patient', identifier: [{ system: MRN, value: 'P-1' }] });
    expect(await found(repo, `${MRN}|P-1`)).toEqual([a.id]);
    expect(scan).not.toHaveBeenCalled();
    await repo.search({ resourceType: 'Patient', filters: [{ code: 'gender', operator: Operator.EQUALS, value: 'female' }] });
    expect(scan).toHaveBeenCalledTimes(1);
  });

  it('finds by system|value or value alone, only what matches now', async () => {
    const repo = newRepo();
    const a = await repo.createResource({ resourceType: 'Patient', identifier: [{ system: MRN, value: 'P-1' }] });
    const b = await repo.createResource({ resourceType: 'Patient', identifier: [{ system: OTHER, value: 'P-1' }] });
    await repo.createResource({ resourceType: 'Patient', identifier: [{ system: MRN, value: 'P-2' }] });
    expect(await found(repo, `${MRN}|P-1`)).toEqual([a.id]);
    expect(await found(repo, 'P-1')).toEqual([a.id, b.id].sort());
    expect((await repo.search(byIdentifier(`${MRN}|P-1`))).total).toBe(1);

    // The identifier moves: the old value no longer finds it; a deleted resource is found by nothing.
    await repo.updateResource({ ...a, identifier: [{ system: MRN, value: 'P-9' }] });
    expect(await found(repo, `${MRN}|P-1`)).toEqual([]);
    expect(await found(repo, `${MRN}|P-9`)).toEqual([a.id]);
    await repo.deleteResource('Patient', a.id);
    expect(await found(repo, `${MRN}|P-9`)).toEqual([]);
  });

  it('answers two identifiers ANDed (and any other filter) from its index: only what matches them all', async () => {
    const repo = newRepo();
    const both = await repo.createResource({ resourceType: 'Patient', identifier: [{ system: MRN, value: 'P-1' }, { system: OTHER, value: 'X-1' }], gender: 'female' });
    await repo.createResource({ resourceType: 'Patient', identifier: [{ system: MRN, value: 'P-1' }, { system: OTHER, value: 'X-2' }], gender: 'female' });
    await repo.createResource({ resourceType: 'Patient', identifier: [{ system: OTHER, value: 'X-1' }], gender: 'female' });
    const scan = jest.spyOn(MemoryRepository.prototype, 'search');
    const ids = async (...filters: Filter[]) => ((await repo.search({ resourceType: 'Patient', filters })).entry ?? []).map((e) => e.resource?.id);
    const identifier = (value: string): Filter => ({ code: 'identifier', operator: Operator.EQUALS, value });
    expect(await ids(identifier(`${MRN}|P-1`), identifier(`${OTHER}|X-1`))).toEqual([both.id]);
    expect(await ids(identifier(`${OTHER}|X-1`), identifier(`${MRN}|P-1`))).toEqual([both.id]);
    expect(await ids(identifier(`${MRN}|P-1`), { code: 'gender', operator: Operator.EQUALS, value: 'male' })).toEqual([]);
    expect(scan).not.toHaveBeenCalled();
  });

  it('forgets what a failed transaction wrote, and restores what it replaced with its history', async () => {
    const repo = newRepo();
    const kept = await repo.createResource({ resourceType: 'Patient', identifier: [{ system: MRN, value: 'P-1' }], gender: 'female' });
    await expect(
      repo.withTransaction(async () => {
        await repo.createResource({ resourceType: 'Patient', identifier: [{ system: MRN, value: 'P-2' }] });
        await repo.updateResource({ ...kept, gender: 'male' });
        await repo.deleteResource('Patient', kept.id);
        throw new Error('a later entry failed');
      }),
    ).rejects.toThrow('a later entry failed');
    expect(await found(repo, `${MRN}|P-2`)).toEqual([]);
    expect(await repo.readResource('Patient', kept.id)).toEqual(kept);
    expect((await repo.readHistory('Patient', kept.id)).entry).toHaveLength(1);
  });

  it('keeps a committed transaction whole', async () => {
    const repo = newRepo();
    await repo.withTransaction(async () => {
      await repo.createResource({ resourceType: 'Patient', identifier: [{ system: MRN, value: 'P-3' }] });
    });
    expect(await found(repo, `${MRN}|P-3`)).toHaveLength(1);
  });
});

describe('RollbackRepository writes', () => {
  it('hands back the version it stored, frozen, as MemoryRepository stores it (empty values left out, id and meta set)', async () => {
    const repo = newRepo();
    const input = { resourceType: 'Patient' as const, identifier: [{ system: MRN, value: 'P-1' }], name: [], gender: 'female' as const };
    const created = await repo.createResource(input);
    expect(created).toEqual({ resourceType: 'Patient', id: expect.any(String), meta: { versionId: expect.any(String), lastUpdated: expect.any(String) }, identifier: [{ system: MRN, value: 'P-1' }], gender: 'female' });
    expect(input).not.toHaveProperty('id');
    expect(() => ((created.identifier?.[0] as { value?: string }).value = 'P-9')).toThrow(TypeError);
    expect(() => Object.assign(created, { gender: 'male' })).toThrow(TypeError);
    expect(await repo.readResource('Patient', created.id)).toEqual(created);
    expect(await found(repo, `${MRN}|P-1`)).toEqual([created.id]);
  });

  it('keeps every version in the history, the latest current', async () => {
    const repo = newRepo();
    const first = await repo.createResource<Patient>({ resourceType: 'Patient', gender: 'female' });
    const second = await repo.updateResource<Patient>({ ...first, gender: 'male' });
    expect(second.meta?.versionId).not.toBe(first.meta?.versionId);
    expect((await repo.readResource<Patient>('Patient', first.id)).gender).toBe('male');
    expect((await repo.readHistory('Patient', first.id)).entry?.map((e) => e.resource?.meta?.versionId).sort()).toEqual([first.meta?.versionId, second.meta?.versionId].sort());
  });
});
