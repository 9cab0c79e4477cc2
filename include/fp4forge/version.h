#ifndef FF_VERSION_H
#define FF_VERSION_H
#define FP4FORGE_VERSION "0.1.0"
#endif
