// gearbox/export.h: symbol visibility for the gearbox shared library.
//
// The library is built with hidden visibility; every declaration that is part of the
// public API is marked GEARBOX_API so that exactly one definition of each symbol (in
// particular the one thread-local profile request) exists per process.
#pragma once

#if defined(_WIN32)
#if defined(GEARBOX_BUILDING_LIBRARY)
#define GEARBOX_API __declspec(dllexport)
#else
#define GEARBOX_API __declspec(dllimport)
#endif
#else
#define GEARBOX_API [[gnu::visibility("default")]]
#endif
