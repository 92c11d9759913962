// The service's icon, served from its own origin (every asset is: no CDN, and the strict CSPs
// allow only 'self'). Without one a browser asks for /favicon.ico on every page and logs a 404.

/** The icon: a speech bubble on the console's accent colour. */
export const FAVICON_SVG =
  '<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 32 32"><rect width="32" height="32" rx="7" fill="#1a5fb4"/>' +
  '<path d="M8 8h16a2 2 0 0 1 2 2v9a2 2 0 0 1-2 2h-9l-5 4v-4H8a2 2 0 0 1-2-2v-9a2 2 0 0 1 2-2z" fill="#fff"/></svg>';

/**
 * The same icon as /favicon.ico (one 32 px PNG in an ICO container), for what asks for that path
 * by itself: a browser showing a JSON answer, feed readers, bookmarks. Rendered from FAVICON_SVG.
 */
export const FAVICON_ICO = Buffer.from(
  'AAABAAEAICAAAAEAIAD/AQAAFgAAAIlQTkcNChoKAAAADUlIRFIAAAAgAAAAIAgGAAAAc3p69AAAAbRJREFUeJzslz9Lw1AUxc99jYsV1EVtHRwEdREcHPwGYouDuAlakX4BQRD8BoIg6OLgUDroJEWsf1adHKoIKqggCmJtnSKo0L/Xd4WWDqa0NG0c+ptucpN7Di+PJMdACR3zkY5Wbllk8BgYI0TUBRtg5ncQrgh0/k2ZdTM0ZRZ6VCh65o4mFOW29Skv6grH8+wKJsK+46IBz2x0nBRO0EDyrHxigtpnop1uA7faigcNheOfRsuw0epCoPHiAnnd6eycItIbziFEWzHIMQOibRChDw4h2oZV0z/ag+XpIfR73KiFx7cvrO7d4TCW+LOvrG5cmhqsWVyQGTLLCssVGOhtg12Um6XgME0DTQNNA//XwMPrJ+yi3CxLA2uRezwlv1Er8i2QWVaQNxBlVMBryF+s09k8VsI32D17Qa0YVV6PpJlCcDOGy0cTdlCVgQstGtyI4f0jBbuo2MDO6Yte9mtkchU9sYohT+AgoQNDNxxAB6CkAtMVnEJr659SOGZAtBWUa0uX9mzp6uRN0VaJ0MQzMxbQaFjNi/bvm/AtPBmRrCZxCXVHwqnyxcP+fTmi0pYT8fwHAAD//0dQ9W4AAAAGSURBVAMA7gekXC07L9IAAAAASUVORK5CYII=',
  'base64',
);

/** The head links every page of the service carries, so no browser goes looking for an icon elsewhere. */
export const FAVICON_LINKS =
  '<link rel="icon" href="/favicon.svg" type="image/svg+xml"><link rel="alternate icon" href="/favicon.ico" sizes="32x32">';
