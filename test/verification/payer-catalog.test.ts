import { mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import * as path from 'node:path';
import { VerificationClient } from '../../src/verification/client';
import { PayerCatalog, normaliseName, type CatalogSnapshot } from '../../src/verification/payer-catalog';
import type { Payer } from '../../src/verification/wire';
import { json, startScriptedServer } from '../support/http-server';

const feature = (portals: string[]) => ({ supported: true, portals });
const payers: Payer[] = [
  {
    primaryPayerId: 'DDCA01',
    commonPayerId: 'CDCA1',
    alternatePayerIds: ['94276'],
    name: 'Delta Dental of California',
    features: { insuranceVerificationSynchronous: feature(['deltadentalins']), insuranceVerificationAsynchronous: feature(['deltadentalins']) },
  },
  {
    primaryPayerId: 'DDPA02',
    commonPayerId: 'CDCA1',
    name: 'Delta Dental of Pennsylvania',
    features: { insuranceVerificationSynchronous: feature(['deltadentalins']) },
  },
  {
    primaryPayerId: 'MET001',
    commonPayerId: '65978',
    name: 'MetLife',
    features: { insuranceVerificationSynchronous: feature(['metdental']), insuranceVerificationAsynchronous: { supported: false } },
  },
];
const snapshot: CatalogSnapshot = { syncedAt: '2026-11-01T00:00:00Z', payers, portals: [{ portalId: 'deltadentalins' }, { portalId: 'metdental' }] };
const aliases = { names: { 'MET LIFE DENTAL': 'MetLife' }, ids: { MET01: '65978' } };

describe('PayerCatalog.resolve', () => {
  const catalog = new PayerCatalog(snapshot, aliases);

  it('resolves by name regardless of case, punctuation and spacing', () => {
    expect(catalog.resolve({ name: 'metlife' })).toMatchObject({ status: 'resolved', matchedBy: 'name', primaryPayerId: 'MET001' });
    expect(catalog.resolve({ name: 'DELTA  DENTAL of california.' })).toMatchObject({ status: 'resolved', primaryPayerId: 'DDCA01' });
  });

  it('resolves a unique common id and reports its portals and async support', () => {
    expect(catalog.resolve({ id: '65978' })).toEqual({
      status: 'resolved',
      matchedBy: 'commonPayerId',
      primaryPayerId: 'MET001',
      commonPayerId: '65978',
      name: 'MetLife',
      syncPortals: ['metdental'],
      asyncPortals: [],
      supportsAsync: false,
    });
  });

  it('reports a common id that covers several payers as ambiguous, never guessing', () => {
    const r = catalog.resolve({ id: 'cdca1' });
    expect(r.status).toBe('ambiguous');
    expect(r.status === 'ambiguous' && r.candidates.map((c) => c.primaryPayerId)).toEqual(['DDCA01', 'DDPA02']);
  });

  it('lets the name narrow an ambiguous common id to one payer', () => {
    expect(catalog.resolve({ id: 'CDCA1', name: 'Delta Dental of Pennsylvania' })).toMatchObject({
      status: 'resolved',
      matchedBy: 'commonPayerId',
      primaryPayerId: 'DDPA02',
      supportsAsync: false,
    });
  });

  it('resolves alternate ids and aliases from mappings', () => {
    expect(catalog.resolve({ id: '94276' })).toMatchObject({ status: 'resolved', matchedBy: 'alternatePayerId', primaryPayerId: 'DDCA01', supportsAsync: true });
    expect(catalog.resolve({ name: 'Met-Life Dental' })).toMatchObject({ status: 'resolved', matchedBy: 'alias', primaryPayerId: 'MET001' });
    expect(catalog.resolve({ id: 'met01' })).toMatchObject({ status: 'resolved', matchedBy: 'alias', primaryPayerId: 'MET001' });
  });

  it('falls back from an unknown id to the name, and reports what matches nothing as unknown', () => {
    expect(catalog.resolve({ id: 'ZZZ99', name: 'MetLife' })).toMatchObject({ status: 'resolved', matchedBy: 'name' });
    expect(catalog.resolve({ name: 'Acme Dental Plan' })).toEqual({ status: 'unknown' });
    expect(catalog.resolve({})).toEqual({ status: 'unknown' });
  });

  it('reads the shipped alias file', () => {
    const shipped = new PayerCatalog(snapshot);
    expect(shipped.resolve({ name: 'DDCA' })).toMatchObject({ status: 'resolved', primaryPayerId: 'DDCA01' });
  });

  it('searches names and ids', () => {
    expect(catalog.search('delta').map((p) => p.primaryPayerId)).toEqual(['DDCA01', 'DDPA02']);
    expect(catalog.search('9427').map((p) => p.name)).toEqual(['Delta Dental of California']);
    expect(normaliseName('Blue Cross & Blue Shield')).toBe('BLUE CROSS AND BLUE SHIELD');
  });
});

describe('PayerCatalog files and sync', () => {
  it('saves and loads a snapshot, and names the field of a damaged one', async () => {
    const dir = await mkdtemp(path.join(tmpdir(), 'catalog-'));
    try {
      const file = path.join(dir, 'nested', 'catalog.json');
      await new PayerCatalog(snapshot, aliases).save(file);
      const loaded = await PayerCatalog.load(file, aliases);
      expect(loaded.payers).toHaveLength(3);
      const raw = JSON.parse(await readFile(file, 'utf8')) as CatalogSnapshot;
      await writeFile(file, JSON.stringify({ ...raw, syncedAt: 'yesterday' }));
      await expect(PayerCatalog.load(file, aliases)).rejects.toThrow('payer catalog catalog.json: syncedAt: ');
      await writeFile(file, '{\n  "syncedAt": Delta\n}');
      await expect(PayerCatalog.load(file, aliases)).rejects.toThrow(
        new Error('payer catalog catalog.json: not valid JSON at line 2, column 15: unexpected character where a value was expected'),
      );
    } finally {
      await rm(dir, { recursive: true, force: true });
    }
  });

  it('loads a saved catalog holding a payer this version cannot read (a blank primaryPayerId saved before it was refused), leaving that payer out and naming it', async () => {
    const dir = await mkdtemp(path.join(tmpdir(), 'catalog-'));
    try {
      const file = path.join(dir, 'catalog.json');
      await writeFile(file, JSON.stringify({ ...snapshot, payers: [payers[0], { ...payers[1], primaryPayerId: '' }, payers[2]], portals: [{ portalId: 'metdental' }, { name: 'no id' }] }));
      const unreadable: string[] = [];
      const loaded = await PayerCatalog.load(file, aliases, { unreadable: (found) => unreadable.push(...found) });
      expect(loaded.payers.map((p) => p.primaryPayerId)).toEqual(['DDCA01', 'MET001']);
      expect(loaded.portals.map((p) => p.portalId)).toEqual(['metdental']);
      expect(loaded.resolve({ name: 'MetLife' })).toMatchObject({ status: 'resolved', primaryPayerId: 'MET001' });
      expect(unreadable).toEqual(['payers.1.primaryPayerId: must not be blank', 'portals.1.portalId: Invalid input: expected string, received undefined']);
    } finally {
      await rm(dir, { recursive: true, force: true });
    }
  });

  it('drops a payer the network no longer lists on a full sync, which an incremental one cannot see', async () => {
    let listed = payers;
    const server = await startScriptedServer((req, res) => {
      const url = new URL(req.url, 'http://x');
      if (url.pathname === '/v2/network/portals') return json(res, 200, { items: [], nextCursor: null });
      json(res, 200, { items: url.searchParams.get('updatedSince') ? [] : listed, nextCursor: null });
    });
    const client = new VerificationClient({ baseUrl: server.url, apiKey: 'k' });
    try {
      const first = await PayerCatalog.sync(client, undefined, { aliases });
      listed = payers.filter((p) => p.primaryPayerId !== 'MET001');
      const incremental = await PayerCatalog.sync(client, first, { aliases });
      expect(incremental.payers.map((p) => p.primaryPayerId)).toEqual(['DDCA01', 'DDPA02', 'MET001']);
      const full = await PayerCatalog.sync(client, incremental, { aliases, full: true });
      expect(server.requests.at(-2)?.url).toBe('/v2/network/payers?limit=100');
      expect(full.payers.map((p) => p.primaryPayerId)).toEqual(['DDCA01', 'DDPA02']);
      expect(full.resolve({ name: 'MetLife' })).toEqual({ status: 'unknown' });
    } finally {
      await Promise.all([client.close(), server.close()]);
    }
  });

  it('refreshes the payers and portals it can read when the service lists one it cannot, and names where that one failed', async () => {
    const server = await startScriptedServer((req, res) => {
      const url = new URL(req.url, 'http://x');
      if (url.pathname === '/v2/network/portals') return json(res, 200, { items: [{ portalId: 'p1' }, { portalId: 42 }], nextCursor: null });
      json(res, 200, { items: [payers[0], { ...payers[1], primaryPayerId: ' ' }, payers[2]], nextCursor: null });
    });
    const client = new VerificationClient({ baseUrl: server.url, apiKey: 'k' });
    try {
      const unreadable: string[] = [];
      const catalog = await PayerCatalog.sync(client, undefined, { aliases, unreadable: (found) => unreadable.push(...found) });
      expect(catalog.payers.map((p) => p.primaryPayerId)).toEqual(['DDCA01', 'MET001']);
      expect(catalog.portals.map((p) => p.portalId)).toEqual(['p1']);
      expect(unreadable).toEqual(['items.1.primaryPayerId: must not be blank', 'items.1.portalId: Invalid input: expected string, received number']);
    } finally {
      await Promise.all([client.close(), server.close()]);
    }
  });

  it('fetches every page the first time, then only what changed since, merged by id', async () => {
    const server = await startScriptedServer((req, res) => {
      const url = new URL(req.url, 'http://x');
      const since = url.searchParams.get('updatedSince');
      if (url.pathname === '/v2/network/portals') return json(res, 200, { items: since ? [] : [{ portalId: 'p1' }], nextCursor: null });
      if (since) return json(res, 200, { items: [{ ...payers[2], name: 'MetLife Dental' }], nextCursor: null });
      return url.searchParams.get('cursor') === 'page2'
        ? json(res, 200, { items: payers.slice(2), nextCursor: null })
        : json(res, 200, { items: payers.slice(0, 2), nextCursor: 'page2' });
    });
    const client = new VerificationClient({ baseUrl: server.url, apiKey: 'k' });
    try {
      const first = await PayerCatalog.sync(client, undefined, { aliases, now: () => new Date('2026-11-20T10:00:00Z') });
      expect(first.payers.map((p) => p.primaryPayerId)).toEqual(['DDCA01', 'DDPA02', 'MET001']);
      expect(first.snapshot.syncedAt).toBe('2026-11-20T10:00:00.000Z');
      const second = await PayerCatalog.sync(client, first, { aliases, now: () => new Date('2026-11-21T10:00:00Z') });
      expect(server.requests.at(-2)?.url).toBe('/v2/network/payers?limit=100&updatedSince=2026-11-20T10%3A00%3A00.000Z');
      expect(second.payers).toHaveLength(3);
      expect(second.resolve({ name: 'MetLife Dental' })).toMatchObject({ status: 'resolved', primaryPayerId: 'MET001' });
      expect(second.portals.map((p) => p.portalId)).toEqual(['p1']);
    } finally {
      await Promise.all([client.close(), server.close()]);
    }
  });
});
