// The system's Vulkan-Hpp, plus VK_EXT_layer_settings where its headers predate it.
//
// llama.cpp's Vulkan backend (built by llama-cpp-sys-2 with Quarry's `vulkan` feature) names
// VK_EXT_layer_settings types unconditionally; they arrived in Vulkan headers 1.3.272, and
// Debian 12 ships 1.3.239. llama.cpp always chains a VkLayerSettingsCreateInfoEXT (asking the
// validation layer for best-practice checks) into its instance's create info, but enables the
// extension only for validation builds; without it the loader and drivers skip the struct, as
// they do with newer headers. So the definitions below (the registry's, in layout and sType)
// are all it needs; with newer headers this file only includes the system's.
// `.cargo/config.toml` adds this folder to llama.cpp's include path
// (CMAKE_CXX_STANDARD_INCLUDE_DIRECTORIES): CMake puts it after the explicit include paths but
// before the compiler's own /usr/include, where Debian's headers are, so this file is found
// first and #include_next reaches the system's.
#pragma once

#include_next <vulkan/vulkan.hpp>

#ifndef VK_EXT_layer_settings
#define VK_EXT_layer_settings 1
#define VK_EXT_LAYER_SETTINGS_SPEC_VERSION 2
#define VK_EXT_LAYER_SETTINGS_EXTENSION_NAME "VK_EXT_layer_settings"

typedef enum VkLayerSettingTypeEXT {
    VK_LAYER_SETTING_TYPE_BOOL32_EXT = 0,
    VK_LAYER_SETTING_TYPE_INT32_EXT = 1,
    VK_LAYER_SETTING_TYPE_INT64_EXT = 2,
    VK_LAYER_SETTING_TYPE_UINT32_EXT = 3,
    VK_LAYER_SETTING_TYPE_UINT64_EXT = 4,
    VK_LAYER_SETTING_TYPE_FLOAT32_EXT = 5,
    VK_LAYER_SETTING_TYPE_FLOAT64_EXT = 6,
    VK_LAYER_SETTING_TYPE_STRING_EXT = 7,
    VK_LAYER_SETTING_TYPE_MAX_ENUM_EXT = 0x7FFFFFFF
} VkLayerSettingTypeEXT;

typedef struct VkLayerSettingEXT {
    const char *pLayerName;
    const char *pSettingName;
    VkLayerSettingTypeEXT type;
    uint32_t valueCount;
    const void *pValues;
} VkLayerSettingEXT;

// VK_STRUCTURE_TYPE_LAYER_SETTINGS_CREATE_INFO_EXT
#define QUARRY_VK_STRUCTURE_TYPE_LAYER_SETTINGS_CREATE_INFO_EXT ((VkStructureType)1000496000)

typedef struct VkLayerSettingsCreateInfoEXT {
    VkStructureType sType;
    const void *pNext;
    uint32_t settingCount;
    const VkLayerSettingEXT *pSettings;
} VkLayerSettingsCreateInfoEXT;

namespace VULKAN_HPP_NAMESPACE {

enum class LayerSettingTypeEXT {
    eBool32 = VK_LAYER_SETTING_TYPE_BOOL32_EXT,
    eInt32 = VK_LAYER_SETTING_TYPE_INT32_EXT,
    eInt64 = VK_LAYER_SETTING_TYPE_INT64_EXT,
    eUint32 = VK_LAYER_SETTING_TYPE_UINT32_EXT,
    eUint64 = VK_LAYER_SETTING_TYPE_UINT64_EXT,
    eFloat32 = VK_LAYER_SETTING_TYPE_FLOAT32_EXT,
    eFloat64 = VK_LAYER_SETTING_TYPE_FLOAT64_EXT,
    eString = VK_LAYER_SETTING_TYPE_STRING_EXT
};

struct LayerSettingEXT {
    using NativeType = VkLayerSettingEXT;

    LayerSettingEXT(const char *pLayerName_ = {}, const char *pSettingName_ = {},
                    LayerSettingTypeEXT type_ = LayerSettingTypeEXT::eBool32,
                    uint32_t valueCount_ = {}, const void *pValues_ = {}) VULKAN_HPP_NOEXCEPT
        : pLayerName(pLayerName_),
          pSettingName(pSettingName_),
          type(type_),
          valueCount(valueCount_),
          pValues(pValues_) {}

    const char *pLayerName;
    const char *pSettingName;
    LayerSettingTypeEXT type;
    uint32_t valueCount;
    const void *pValues;
};
static_assert(sizeof(LayerSettingEXT) == sizeof(VkLayerSettingEXT), "LayerSettingEXT layout");

struct LayerSettingsCreateInfoEXT {
    using NativeType = VkLayerSettingsCreateInfoEXT;

    LayerSettingsCreateInfoEXT(ArrayProxyNoTemporaries<const LayerSettingEXT> const &settings_,
                               const void *pNext_ = nullptr)
        : pNext(pNext_),
          settingCount(static_cast<uint32_t>(settings_.size())),
          pSettings(settings_.data()) {}

    StructureType sType =
        static_cast<StructureType>(QUARRY_VK_STRUCTURE_TYPE_LAYER_SETTINGS_CREATE_INFO_EXT);
    const void *pNext = {};
    uint32_t settingCount = {};
    const LayerSettingEXT *pSettings = {};
};
static_assert(sizeof(LayerSettingsCreateInfoEXT) == sizeof(VkLayerSettingsCreateInfoEXT),
              "LayerSettingsCreateInfoEXT layout");

}  // namespace VULKAN_HPP_NAMESPACE
#endif
