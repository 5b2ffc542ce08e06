/**
 * The sandbox's payer and portal network: the major US dental payers under their public names.
 *
 * Common payer ids are the ones clearinghouses commonly publish for these payers where we know
 * one (MetLife 65978, Cigna 62308, Aetna 60054, Guardian 64246, UnitedHealthcare 52133, Humana
 * 73288, Ameritas 47009, Principal 61271, United Concordia CX014, the Delta Dental CDxx1 ids);
 * the rest (MCDNT, the lettered alternate ids) are made up. They are sandbox data, good for
 * exercising payer resolution, not an authoritative payer list. Primary payer ids are made up by
 * the sandbox (six alphanumerics, as the service's are). The catalog deliberately holds:
 *  - sync-only payers and async-capable ones, and one payer with no synchronous verification;
 *  - one common id (94276) shared by two payers, as the service warns common ids can be;
 *  - portals with TwoFactorEmail, TwoFactorSms or no authentication, and Native and SSO login;
 *  - a multi-payer portal (Availity) and a payer checked across two portals.
 */
import type { Payer, PayerFeature, Portal } from '../verification/wire';
import { FEATURE_ASYNC, FEATURE_SYNC } from '../verification/wire';

/** A portal as the sandbox holds it: every field the wire shape names is present. */
export type SandboxPortal = Portal & {
  name: string;
  url: string;
  requiresAuthentication: boolean;
  authenticationMethods: string[];
  loginMethods: string[];
  createdAt: string;
  updatedAt: string;
};

export type SandboxPayer = Payer & {
  commonPayerId: string;
  alternatePayerIds: string[];
  features: Record<string, PayerFeature>;
  createdAt: string;
  updatedAt: string;
  /** Sandbox-only, not served: the plan type its derived results carry. */
  planType: 'PPO' | 'DHMO' | 'Indemnity' | 'Medicaid' | 'Medicare';
  phone: string;
};

const CATALOG_CREATED = '2024-01-15T00:00:00.000Z';
const CATALOG_UPDATED = '2026-06-01T00:00:00.000Z';

function portal(
  portalId: string,
  name: string,
  url: string,
  auth: { methods: Array<'TwoFactorEmail' | 'TwoFactorSms'>; login: Array<'Native' | 'SSO'> } | 'none',
): SandboxPortal {
  return {
    portalId,
    name,
    url,
    requiresAuthentication: auth !== 'none',
    authenticationMethods: auth === 'none' ? [] : auth.methods,
    loginMethods: auth === 'none' ? [] : auth.login,
    createdAt: CATALOG_CREATED,
    updatedAt: CATALOG_UPDATED,
  };
}

export function defaultPortals(): SandboxPortal[] {
  return [
    portal('deltadentalins', 'Delta Dental Provider Tools', 'https://www.deltadentalins.com/dentists', {
      methods: ['TwoFactorEmail'],
      login: ['Native'],
    }),
    portal('deltadentalwa', 'Delta Dental of Washington Provider Portal', 'https://www.deltadentalwa.com/provider', {
      methods: ['TwoFactorSms'],
      login: ['Native'],
    }),
    portal('deltadentalil', 'Delta Dental of Illinois Provider Portal', 'https://www.deltadentalil.com/providers', {
      methods: ['TwoFactorEmail'],
      login: ['SSO'],
    }),
    portal('modaprovider', 'Moda Health Provider Portal', 'https://www.modahealth.com/providers', {
      methods: ['TwoFactorEmail'],
      login: ['Native'],
    }),
    portal('metdental', 'MetLife Dental (MetDental)', 'https://www.metdental.com', { methods: ['TwoFactorEmail'], login: ['Native'] }),
    portal('cignaforhcp', 'Cigna for Health Care Professionals', 'https://cignaforhcp.cigna.com', {
      methods: ['TwoFactorSms'],
      login: ['Native'],
    }),
    portal('availity', 'Availity Essentials', 'https://www.availity.com', { methods: ['TwoFactorEmail'], login: ['Native', 'SSO'] }),
    portal('guardiananytime', 'Guardian Anytime', 'https://www.guardiananytime.com', { methods: ['TwoFactorEmail'], login: ['Native'] }),
    portal('uhcprovider', 'UnitedHealthcare Provider Portal', 'https://www.uhcprovider.com', { methods: ['TwoFactorSms'], login: ['SSO'] }),
    portal('uhcdental', 'UnitedHealthcare Dental Benefit Providers', 'https://www.uhcdental.com', {
      methods: ['TwoFactorEmail'],
      login: ['Native'],
    }),
    portal('ameritas', 'Ameritas Provider Online Services', 'https://www.ameritas.com/dental/providers', {
      methods: ['TwoFactorEmail'],
      login: ['Native'],
    }),
    portal('principal', 'Principal Dental Provider Portal', 'https://www.principal.com/dentalproviders', {
      methods: ['TwoFactorEmail'],
      login: ['Native'],
    }),
    portal('principal-benefit-line', 'Principal Dental Benefit Line (public lookup)', 'https://www.principal.com/dentalproviders/benefits', 'none'),
    portal('unitedconcordia', 'United Concordia Dental Provider Portal', 'https://www.unitedconcordia.com/dental-providers', {
      methods: ['TwoFactorEmail'],
      login: ['Native'],
    }),
    portal('medi-cal-dental', 'Medi-Cal Dental Provider Portal', 'https://www.dental.dhcs.ca.gov', {
      methods: ['TwoFactorSms'],
      login: ['Native'],
    }),
  ];
}

function features(
  sync: string[] | undefined,
  async: { portals: string[]; requirements?: string[] } | undefined,
): Record<string, PayerFeature> {
  const out: Record<string, PayerFeature> = {};
  out[FEATURE_SYNC] = sync ? { supported: true, portals: sync } : { supported: false, portals: [] };
  out[FEATURE_ASYNC] = async
    ? { supported: true, portals: async.portals, requirements: async.requirements ?? [] }
    : { supported: false, portals: [] };
  return out;
}

function payer(
  primaryPayerId: string,
  name: string,
  ids: { common: string; alternate?: string[] },
  planType: SandboxPayer['planType'],
  phone: string,
  feat: Record<string, PayerFeature>,
): SandboxPayer {
  return {
    primaryPayerId,
    commonPayerId: ids.common,
    alternatePayerIds: ids.alternate ?? [],
    name,
    features: feat,
    createdAt: CATALOG_CREATED,
    updatedAt: CATALOG_UPDATED,
    planType,
    phone,
  };
}

const TAX_NPI = ['OfficeTaxId', 'ProviderNpi'];

export function defaultPayers(): SandboxPayer[] {
  return [
    payer('X26ZCF', 'Delta Dental of California', { common: 'CDCA1', alternate: ['77777'] }, 'PPO', '+18007656003',
      features(['deltadentalins'], { portals: ['deltadentalins'], requirements: TAX_NPI })),
    payer('D7KQ2M', 'Delta Dental Insurance Company', { common: '94276', alternate: ['CDDIC'] }, 'PPO', '+18005217873',
      features(['deltadentalins'], { portals: ['deltadentalins'], requirements: TAX_NPI })),
    payer('D9USA4', 'DeltaCare USA', { common: '94276', alternate: ['DCUSA'] }, 'DHMO', '+18005227873',
      features(['deltadentalins'], undefined)),
    payer('W4DDWA', 'Delta Dental of Washington', { common: 'CDWA1', alternate: ['91062'] }, 'PPO', '+18005548000',
      features(['deltadentalwa'], undefined)),
    payer('R8DDOR', 'Delta Dental of Oregon', { common: 'CDOR1' }, 'PPO', '+18006621336',
      features(['modaprovider'], { portals: ['modaprovider'] })),
    payer('L3DDIL', 'Delta Dental of Illinois', { common: 'CDIL1', alternate: ['47598'] }, 'PPO', '+18008567755',
      features(['deltadentalil'], { portals: ['deltadentalil'], requirements: ['OfficeTaxId'] })),
    payer('M6MET1', 'MetLife', { common: '65978', alternate: ['METLIFE'] }, 'PPO', '+18776384557',
      features(['metdental'], { portals: ['metdental'], requirements: ['OfficeTaxId', 'ProviderNpi', 'OfficeAddress'] })),
    payer('C2CIG8', 'Cigna Dental', { common: '62308', alternate: ['CIGNA'] }, 'PPO', '+18002442446',
      features(['cignaforhcp'], { portals: ['cignaforhcp'], requirements: TAX_NPI })),
    payer('A5AET3', 'Aetna Dental', { common: '60054', alternate: ['AETNA'] }, 'PPO', '+18004513631',
      features(['availity'], { portals: ['availity'], requirements: ['ProviderNpi', 'OrganizationNpi'] })),
    payer('G1GRD7', 'Guardian', { common: '64246', alternate: ['GUARD'] }, 'PPO', '+18005417846',
      features(['guardiananytime'], undefined)),
    payer('U9UHC2', 'UnitedHealthcare Dental', { common: '52133', alternate: ['UHCDN'] }, 'PPO', '+18008220350',
      features(['uhcdental', 'uhcprovider'], { portals: ['uhcdental', 'uhcprovider'], requirements: TAX_NPI })),
    payer('H4HUM6', 'Humana Dental', { common: '73288', alternate: ['HUMANA'] }, 'PPO', '+18004461474',
      features(['availity'], undefined)),
    payer('T7AMR5', 'Ameritas', { common: '47009', alternate: ['AMRTS'] }, 'Indemnity', '+18004875553',
      features(undefined, { portals: ['ameritas'], requirements: ['OfficeName', 'OfficeAddress', 'OfficeSuite'] })),
    payer('P2PRN8', 'Principal Financial Group', { common: '61271', alternate: ['PRNCPL'] }, 'PPO', '+18002475884',
      features(['principal-benefit-line', 'principal'], { portals: ['principal', 'principal-benefit-line'] })),
    payer('N3UCD1', 'United Concordia Dental', { common: 'CX014', alternate: ['89070'] }, 'PPO', '+18663571584',
      features(['unitedconcordia'], { portals: ['unitedconcordia'], requirements: ['ProviderFirstName', 'ProviderLastName', 'ProviderNpi'] })),
    payer('K8MCAL', 'Medi-Cal Dental', { common: 'MCDNT', alternate: ['DENTICAL'] }, 'Medicaid', '+18003221516',
      features(['medi-cal-dental'], undefined)),
  ];
}

/** What the service serves for a payer: the sandbox-only fields left out. */
export function publicPayer(p: SandboxPayer): Payer {
  const { planType: _planType, phone: _phone, ...rest } = p;
  return rest;
}

const norm = (s: string) => s.trim().toUpperCase().replace(/\s+/g, ' ');

export type PayerLookup =
  | { status: 'found'; payer: SandboxPayer }
  | { status: 'ambiguous'; candidates: SandboxPayer[] }
  | { status: 'primary-id'; payer: SandboxPayer }
  | { status: 'unknown' };

/**
 * How the sandbox resolves the payer a request names: by common or alternate id, narrowed by the
 * name (and then by the portal) when an id covers several payers; by name when there is no id or
 * the id is unknown. A primary payer id is recognised and refused, as the service refuses it.
 */
export function lookupPayer(
  payers: SandboxPayer[],
  named: { payerId?: string | undefined; name?: string | undefined },
  portalId?: string,
): PayerLookup {
  const byName = named.name ? payers.filter((p) => norm(p.name) === norm(named.name as string)) : [];
  if (named.payerId) {
    const id = norm(named.payerId);
    let matches = payers.filter((p) => norm(p.commonPayerId) === id || p.alternatePayerIds.some((a) => norm(a) === id));
    if (matches.length > 1 && byName.length > 0) matches = matches.filter((p) => byName.includes(p));
    if (matches.length > 1 && portalId) {
      const onPortal = matches.filter((p) => Object.values(p.features).some((f) => f?.portals?.includes(portalId)));
      if (onPortal.length > 0) matches = onPortal;
    }
    if (matches.length === 1) return { status: 'found', payer: matches[0] as SandboxPayer };
    if (matches.length > 1) return { status: 'ambiguous', candidates: matches };
    const primary = payers.find((p) => norm(p.primaryPayerId) === id);
    if (primary && byName.length === 0) return { status: 'primary-id', payer: primary };
  }
  if (byName.length === 1) return { status: 'found', payer: byName[0] as SandboxPayer };
  return { status: 'unknown' };
}
