import { domainToASCII } from 'node:url';

// The rules for an email address the service can send to. The domain may be internationalised
// (x@exämple.com): mail providers take it as punycode (IDNA), which asciiEmailAddress gives. The
// mailbox name before the @ must be ASCII: a non-ASCII one needs SMTPUTF8 (RFC 6531) on every hop,
// which the mail providers the service sends through (Postmark) do not offer, so such an address
// would be accepted and then never get its link.

// The dot-atom of RFC 5322, as ajv-formats' email format checks it (no quoted mailbox names).
const DOT_ATOM = /^[a-z0-9!#$%&'*+/=?^_`{|}~-]+(?:\.[a-z0-9!#$%&'*+/=?^_`{|}~-]+)*$/i;
const DNS_LABEL = /^[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?$/i;
// Matching every character outside ASCII is the point.
// eslint-disable-next-line no-control-regex
const NON_ASCII = /[^\u0000-\u007f]/u;

function split(address: string): { local: string; domain: string } | undefined {
  const at = address.lastIndexOf('@');
  if (at <= 0 || at === address.length - 1) return undefined;
  return { local: address.slice(0, at), domain: address.slice(at + 1) };
}

/** The domain in the ASCII form DNS and mail providers use ('' when it is not a domain name). */
function asciiDomain(domain: string): string {
  const ascii = domainToASCII(domain);
  const labels = ascii.split('.');
  return labels.length >= 2 && ascii.length <= 253 && labels.every((l) => DNS_LABEL.test(l)) ? ascii : '';
}

/** Why the service cannot use this address, in words for the person who typed it; undefined when it can. */
export function emailAddressProblem(address: string): string | undefined {
  const parts = split(address);
  if (!parts) return 'it needs a mailbox name, an @ and a domain, as in ada@example.com';
  if (NON_ASCII.test(parts.local))
    return 'the part before the @ must be ASCII letters, digits or punctuation: the mail provider cannot deliver to a mailbox name in other characters (the domain may have them, as in ada@exämple.com)';
  if (parts.local.length > 64 || !DOT_ATOM.test(parts.local))
    return 'the part before the @ holds characters an address cannot have, or dots at its start, end or in a row';
  if (!asciiDomain(parts.domain)) return 'the part after the @ is not a domain name';
  return undefined;
}

/** The address as mail providers take it: the domain in punycode (x@exämple.com -> x@xn--exmple-cua.com). */
export function asciiEmailAddress(address: string): string {
  const parts = split(address);
  if (!parts) return address;
  return `${parts.local}@${asciiDomain(parts.domain) || parts.domain}`;
}
