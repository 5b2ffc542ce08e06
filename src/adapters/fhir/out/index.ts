export { toCoverageEligibilityResponse, type ResponseOptions, type ResponseRefs } from './response';
export { toCoverageEligibilityRequest, type RequestOptions, type RequestRefs } from './request';
export { EXTENSION_KEYS, extensionBase, extensionUrl, type ExtensionKey } from './extensions';
