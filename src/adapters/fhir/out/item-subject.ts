import type { CodeableConcept, CoverageEligibilityResponseInsuranceItem } from 'fhir/r4';
import { categoryConcept, categoryTable, procedureConcept, serviceTypeConcept, serviceTypeForCodes } from './codes';
import { extension } from './extensions';
import { defined, present, said } from './values';

type Maybe<T> = T | null | undefined;

/**
 * What an item is about: a category, or one CDT code, never both (invariant ces-1). A category
 * item lists the procedure codes the source gave in procedure-code extensions; several codes
 * without a category take the category whose CDT ranges hold them all. Codes that no category
 * holds, or only one with no service type (implants) or coded as dental care as a whole, name
 * themselves as the category's text with no coding: coded general, a cleaning and an exam at
 * 100 % read as all dental care at 100 %. One item per code would not do: a frequency limit is shared by its codes.
 */
export function itemSubject(
  category: Maybe<string>,
  procedureCodes: Maybe<string[]>,
): Pick<CoverageEligibilityResponseInsuranceItem, 'category' | 'productOrService' | 'extension'> {
  // A blank category or code names nothing: left empty, it would leave the item with neither. A code
  // padded with a space ('D1110 ') is the code: kept so, it could claim neither the CDT system nor a category.
  const codes = said(procedureCodes).map((code) => code.trim());
  const named = present(category);
  if (!named && codes.length === 1 && codes[0] !== undefined) return { productOrService: procedureConcept(codes[0]), extension: [] };
  const concept = named || codes.length === 0 ? categoryConcept(named) : codesConcept(codes);
  return { category: concept, extension: defined(codes.map((code) => extension('procedure-code', { valueCodeableConcept: procedureConcept(code) }))) };
}

function codesConcept(codes: string[]): CodeableConcept {
  const serviceType = serviceTypeForCodes(codes);
  return serviceType !== undefined && serviceType !== categoryTable().general ? serviceTypeConcept(serviceType) : { text: codes.join(', ') };
}
