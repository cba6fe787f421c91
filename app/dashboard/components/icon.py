"""The browser-tab icon, inline: a material icon or emoji favicon loads from a CDN (offline:
none), an SVG string becomes a data: URL served with the page."""

from __future__ import annotations

PAGE_ICON = (
    '<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 32 32">'
    '<rect width="32" height="32" rx="6" fill="#0067A5"/>'
    '<rect x="6" y="17" width="4" height="9" rx="1" fill="#fff"/>'
    '<rect x="12" y="11" width="4" height="15" rx="1" fill="#fff"/>'
    '<rect x="18" y="14" width="4" height="12" rx="1" fill="#fff"/>'
    '<circle cx="23" cy="9" r="4" fill="none" stroke="#F3C300" stroke-width="2"/>'
    "</svg>"
)
