// msgpuck (Debian's libmsgpuck-dev) is header-only in use, but its lookup tables (mp_type_hint,
// mp_parser_hint, ...) and the out-of-line copies of its inline functions must be defined in
// exactly one translation unit of a program: this one. Every other file includes <msgpuck.h>
// without MP_SOURCE and links kvgate_msgpuck.
#define MP_SOURCE 1
#include <msgpuck.h>
